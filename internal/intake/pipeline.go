package intake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// pipeline carries one ownership epoch's publishes to the events stream and
// its decisions: a goroutine waits for each publish acknowledgement in
// order, counts them for checkpoints, and sends each decision once the
// write it depends on is acknowledged, batched per Submit.
type pipeline struct {
	nc    *nats.Conn
	local func(reply string, data []byte) bool
	// written observes the time from a write's issue to its acknowledgement.
	written prometheus.Observer
	// stored, when not nil, is told the sequence of each acknowledged write.
	stored func(seq uint64)
	items  chan item
	done   chan struct{}

	issued uint64 // publishes handed over; the owner's goroutine only

	mu       sync.Mutex
	acked    uint64
	err      error
	progress chan struct{} // closed and replaced at a change of acked or err that waiting is for
	waiting  bool          // a waitAcked holds progress
}

// item is a publish to wait for, a decision to send, or both (a decision
// that depends on the publish).
type item struct {
	fut    jetstream.PubAckFuture
	at     time.Time // when the write was issued
	reply  string
	dec    decision
	hasDec bool
	// release, when set, runs once every item before it is done and
	// none failed (a failed write may still hold what it releases).
	release func()
}

// futureTimeout bounds the wait for one acknowledgement, in case the client
// never resolves it.
const futureTimeout = 30 * time.Second

// errNoAck is a wait for an acknowledgement that ended at futureTimeout,
// the future still unresolved.
var errNoAck = fmt.Errorf("no acknowledgement within %v: %w", futureTimeout, context.DeadlineExceeded)

// maxDecisionBytes bounds one decisions message.
const maxDecisionBytes = 32 << 10

// newPipeline starts a pipeline; local delivers the decisions of this
// replica's own Submits in process (false: not one of them).
func newPipeline(nc *nats.Conn, local func(reply string, data []byte) bool, written prometheus.Observer, stored func(seq uint64)) *pipeline {
	p := &pipeline{
		nc:       nc,
		local:    local,
		written:  written,
		stored:   stored,
		items:    make(chan item, 4096),
		done:     make(chan struct{}),
		progress: make(chan struct{}),
	}
	go p.run()
	return p
}

// add queues it; the owner's goroutine only.
func (p *pipeline) add(it item) {
	if it.fut != nil {
		p.issued++
		it.at = time.Now()
	}
	p.items <- it
}

// close lets the pipeline finish what it has and end.
func (p *pipeline) close() { close(p.items) }

// waitAcked waits until the first n publishes issued are acknowledged, or
// one failed. Any goroutine; n is a value of issued.
func (p *pipeline) waitAcked(ctx context.Context, n uint64) error {
	for {
		p.mu.Lock()
		err, acked, ch := p.err, p.acked, p.progress
		if err == nil && acked < n {
			p.waiting = true
		}
		p.mu.Unlock()
		if err != nil {
			return err
		}
		if acked >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *pipeline) settle(err error) {
	p.mu.Lock()
	if err != nil {
		if p.err == nil {
			p.err = err
		}
	} else {
		p.acked++
	}
	// Only a waiter needs the channel closed: most acknowledgements have
	// none, and a new channel for each was an allocation per write.
	if p.waiting {
		close(p.progress)
		p.progress = make(chan struct{})
		p.waiting = false
	}
	p.mu.Unlock()
}

func (p *pipeline) run() {
	defer close(p.done)
	groups := make(map[string][]byte)
	flush := func(reply string) {
		if b := groups[reply]; len(b) > 0 && (p.local == nil || !p.local(reply, b)) {
			// At most once: a lost decision leaves the Submit undecided.
			_ = p.nc.Publish(reply, b)
		}
		delete(groups, reply)
	}
	flushAll := func() {
		for r := range groups {
			flush(r)
		}
	}
	var acks ackWaiter
	for {
		var it item
		var ok bool
		if len(groups) > 0 {
			select {
			case it, ok = <-p.items:
			default:
				flushAll()
				continue
			}
		} else {
			it, ok = <-p.items
		}
		if !ok {
			flushAll()
			return
		}
		if it.release != nil {
			// The decisions gathered are encoded: they hold none of it.
			p.mu.Lock()
			failed := p.err != nil
			p.mu.Unlock()
			if !failed {
				it.release()
			}
			continue
		}
		if it.fut != nil {
			// Decisions gathered so far go out before waiting: under a
			// steady load the queue is seldom empty, and a decision must
			// not wait for later writes.
			ack, err := acks.await(it.fut, flushAll)
			if !errors.Is(err, errNoAck) {
				// Resolved: the client is done with its message.
				ejs.Release(it.fut.Msg())
			}
			p.settle(err)
			if p.written != nil && err == nil {
				p.written.Observe(time.Since(it.at).Seconds())
			}
			if err != nil {
				it.hasDec = false // the write is not stored: no decision
			} else {
				it.dec.rv = ack.Sequence
				if p.stored != nil {
					p.stored(ack.Sequence)
				}
			}
		}
		if it.hasDec && it.reply != "" {
			groups[it.reply] = appendDecision(groups[it.reply], it.dec)
			if len(groups[it.reply]) >= maxDecisionBytes {
				flush(it.reply)
			}
		}
	}
}

// ackWaiter waits for acknowledgements one after the other (one
// goroutine), with one timer for all of them.
type ackWaiter struct{ t *time.Timer }

// await waits, at most futureTimeout, for fut's acknowledgement; idle,
// when not nil, runs first if it has not come yet.
func (w *ackWaiter) await(fut jetstream.PubAckFuture, idle func()) (*jetstream.PubAck, error) {
	select {
	case ack := <-fut.Ok():
		return ack, nil
	case err := <-fut.Err():
		return nil, err
	default:
	}
	if idle != nil {
		idle()
	}
	// Reset and Stop leave no stale tick in the channel (Go 1.23 timers).
	if w.t == nil {
		w.t = time.NewTimer(futureTimeout)
	} else {
		w.t.Reset(futureTimeout)
	}
	defer w.t.Stop()
	select {
	case ack := <-fut.Ok():
		return ack, nil
	case err := <-fut.Err():
		return nil, err
	case <-w.t.C:
		return nil, errNoAck
	}
}
