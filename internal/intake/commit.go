package intake

import (
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Group commit. Every intake entry of a partition goes to the log through
// the partition's committer, in the order the calls hand them over, so
// that the calls started one after another stay in that order. While
// maxInFlight entries of the partition wait for their acknowledgement,
// the next ones queue; the batched entries of different calls that queue
// together (HeaderBatch, no message id, no trace context, the same
// HeaderAsIs) are then logged as one entry (HeaderReplies says which call
// each occurrence is of). Idle, an entry is published at once by the
// call itself: the committer only gathers what a busy partition would
// have logged one small entry at a time — ten concurrent unary calls of
// one event each were ten entries, each costing the log, its owner and
// the connection a message, an acknowledgement and a delivery.

// HeaderReplies, on an intake entry of several calls' occurrences, lists
// where the owner sends the decisions, in occurrence order: runs of
// "<reply>*<count>" separated by spaces (the counts add up to the entry's
// occurrences). Such an entry has no HeaderReply; HeaderBatch indexes each
// occurrence in its own call.
const HeaderReplies = "Eventgate-Replies"

// maxInFlight is how many entries of one partition may await their
// acknowledgement before the next ones queue and are gathered.
const maxInFlight = 2

// pendingEntry is a call's entry on its way to the log.
type pendingEntry struct {
	e logEntry
	// mergeable: batched occurrences without a trace context, which may
	// share an entry with other calls' (of the same asIs).
	mergeable bool
	asIs      bool
	done      chan struct{} // closed once ack or err is set
	ack       *jetstream.PubAck
	err       error
}

func (p *pendingEntry) settle(ack *jetstream.PubAck, err error) {
	p.ack, p.err = ack, err
	close(p.done)
}

// committer is one partition's publisher of intake entries.
type committer struct {
	in *Intake

	mu       sync.Mutex
	queue    []*pendingEntry
	inFlight int
	acks     chan flight // to the acknowledger; capacity maxInFlight
	started  bool
}

// flight is one published entry and the calls' entries it carries.
type flight struct {
	fut     jetstream.PubAckFuture
	entries []*pendingEntry
}

func newCommitter(in *Intake) *committer {
	return &committer{in: in, acks: make(chan flight, maxInFlight)}
}

// submit hands the call's entries of this partition over, in order.
func (c *committer) submit(es []*pendingEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		c.started = true
		go c.acknowledge()
	}
	c.queue = append(c.queue, es...)
	c.publishLocked()
}

// publishLocked publishes from the queue while fewer than maxInFlight
// entries await their acknowledgement. c.mu is held: the partition's
// entries are published in queue order.
func (c *committer) publishLocked() {
	for len(c.queue) > 0 && c.inFlight < maxInFlight {
		n := c.gather()
		batch := c.queue[:n:n]
		c.queue = c.queue[n:]
		if len(c.queue) == 0 {
			c.queue = nil
		}
		m := c.message(batch)
		// No Nats-Expected-Stream (stored with each entry): the intake
		// stream is the only one that may capture its subjects.
		fut, err := c.in.callJS.PublishMsgAsync(m)
		if err != nil {
			for _, p := range batch {
				p.settle(nil, err)
			}
			continue
		}
		c.inFlight++
		c.acks <- flight{fut: fut, entries: batch}
	}
}

// gather is how many entries at the head of the queue go to the log as
// one: the first, and the mergeable ones after it that fit beside it.
func (c *committer) gather() int {
	first := c.queue[0]
	if !first.mergeable {
		return 1
	}
	occ, size := len(first.e.idxs), len(first.e.m.Data)
	n := 1
	for ; n < len(c.queue); n++ {
		p := c.queue[n]
		if !p.mergeable || p.asIs != first.asIs || occ+len(p.e.idxs) > maxBatch || size+len(p.e.m.Data) > c.in.batchBytes {
			break
		}
		occ, size = occ+len(p.e.idxs), size+len(p.e.m.Data)
	}
	return n
}

// message is the intake message of entries gathered as one.
func (c *committer) message(batch []*pendingEntry) *nats.Msg {
	first := batch[0].e
	if !first.batched {
		return first.m
	}
	if len(batch) == 1 {
		first.m.Header.Set(HeaderBatch, formatIndexes(first.idxs))
		if raw := first.m.Data; compressBatch(first.m, len(first.idxs)) {
			putEntryBuf(raw)
		}
		return first.m
	}
	var size, occ int
	for _, p := range batch {
		size, occ = size+len(p.e.m.Data), occ+len(p.e.idxs)
	}
	m := first.m
	data := getEntryBuf(size)
	idxs := make([]int, 0, occ)
	var replies strings.Builder
	for i, p := range batch {
		data = append(data, p.e.m.Data...)
		idxs = append(idxs, p.e.idxs...)
		if i > 0 {
			replies.WriteByte(' ')
		}
		replies.WriteString(p.e.m.Header.Get(HeaderReply))
		replies.WriteByte('*')
		replies.WriteString(strconv.Itoa(len(p.e.idxs)))
	}
	// Each call's data is in data now (first's message becomes the
	// merged one).
	for _, p := range batch {
		putEntryBuf(p.e.m.Data)
		p.e.m.Data = nil
	}
	m.Data = data
	m.Header.Del(HeaderReply)
	m.Header.Set(HeaderReplies, replies.String())
	m.Header.Set(HeaderBatch, formatIndexes(idxs))
	if compressBatch(m, occ) {
		putEntryBuf(data)
	}
	return m
}

// acknowledge waits for each published entry's acknowledgement in order,
// settles the calls' entries it carries, and publishes what queued
// meanwhile. After the intake stopped, it still settles what it published
// (the calls were started before), then ends once nothing is in flight; a
// later submit starts another.
func (c *committer) acknowledge() {
	var acks ackWaiter
	for {
		var f flight
		select {
		case f = <-c.acks:
		case <-c.in.stopped:
			c.mu.Lock()
			if c.inFlight == 0 { // and so nothing queued
				c.started = false
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			f = <-c.acks
		}
		ack, err := acks.await(f.fut, nil)
		for _, p := range f.entries {
			p.settle(ack, err)
		}
		if err == nil && f.entries[0].e.batched {
			// Stored: nothing reads a batched entry's data any more (a
			// failed publish may still be retried by the client).
			putEntryBuf(f.fut.Msg().Data)
		}
		c.mu.Lock()
		c.inFlight--
		c.publishLocked()
		c.mu.Unlock()
	}
}

// replyRuns decodes HeaderReplies into the reply of each of n occurrences.
func replyRuns(s string, n int) ([]string, error) {
	out := make([]string, 0, n)
	for run := range strings.SplitSeq(s, " ") {
		i := strings.LastIndexByte(run, '*')
		if i <= 0 {
			return nil, errors.New("replies: bad run")
		}
		k, err := strconv.Atoi(run[i+1:])
		if err != nil || k <= 0 || len(out)+k > n {
			return nil, errors.New("replies: bad count")
		}
		for range k {
			out = append(out, run[:i])
		}
	}
	if len(out) != n {
		return nil, errors.New("replies: fewer than the occurrences")
	}
	return out, nil
}
