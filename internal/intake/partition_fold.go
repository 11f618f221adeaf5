package intake

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/series"
)

// own pulls a batch of entries and handles them in log order, then ticks
// and checkpoints as due. When an entry cannot be handled, the rest of the
// batch is discarded before the consumer is rewound.
func (pt *partition) own(ctx context.Context) {
	batch, err := pt.fetch(pt.in.cfg.FetchBatch, pt.fetchWait())
	if err != nil {
		pt.fetchFailed(ctx, err)
		return
	}
	msgs := batch.Messages()
	var failed error
loop:
	for {
		select {
		case <-ctx.Done():
			pt.syncStats()
			return
		case r := <-pt.usage:
			pt.answer(r)
		case msg, ok := <-msgs:
			if !ok {
				break loop
			}
			if failed = pt.handle(ctx, msg); failed == nil && pt.sinceCkpt >= pt.in.cfg.CheckpointEntries {
				failed = pt.startCheckpoint(ctx)
			}
			if failed != nil {
				drain(ctx, msgs)
				break loop
			}
		}
	}
	pt.syncStats()
	if failed != nil {
		pt.resync(ctx, failed)
		return
	}
	if err := batch.Error(); err != nil {
		if errors.Is(err, jetstream.ErrPinIDMismatch) {
			pt.log.Info("partition pinned to another replica")
			pt.drop()
			return
		}
		pt.fetchFailed(ctx, err)
		if pt.agg == nil {
			return // the consumer was lost, and the partition with it
		}
	}
	pt.maybeTick()
	err = pt.reapCheckpoint(ctx, false)
	if err == nil && time.Since(pt.ckptAt) >= pt.in.cfg.CheckpointInterval {
		err = pt.startCheckpoint(ctx)
	}
	if err != nil {
		pt.resync(ctx, err)
		return
	}
	pt.rebalance(ctx)
}

// handle takes one delivery. The aggregator must see the partition's
// entries in log order without a gap. The consumer delivers them in order
// from where it was last rewound, but a delivery can be lost (a reconnect),
// and another replica may rewind the consumer (a takeover racing a
// deposed owner). So an entry is folded only when it provably follows the
// last one: either it is the next first delivery of the consumer
// (consecutive consumer sequence) after a delivery already handled, or a
// direct read of the log finds no entry of the partition between the
// aggregator's position and it. Otherwise the consumer is rewound.
func (pt *partition) handle(ctx context.Context, msg jetstream.Msg) error {
	if pin := msg.Headers().Get(pinHeader); pin != pt.pin {
		return &pinChange{pin: pin}
	}
	meta, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("%w: delivery metadata: %w", errRead, err)
	}
	seq, dseq := meta.Sequence.Stream, meta.Sequence.Consumer
	first := meta.NumDelivered == 1
	pos := pt.seq
	inChain := pt.chainOK && first && dseq == pt.chainDseq+1
	if !inChain && seq > pos {
		ok, err := pt.follows(ctx, pos, seq)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: entry %d after position %d", errGap, seq, pos)
		}
	}
	pt.chainOK, pt.chainDseq = first, dseq
	if seq <= pos {
		return nil // already folded: a rewind or a replay
	}
	return pt.fold(msg, meta)
}

// follows reports whether seq is the partition's first entry after pos.
func (pt *partition) follows(ctx context.Context, pos, seq uint64) (bool, error) {
	m, err := pt.in.stream.GetMsg(ctx, pos+1, jetstream.WithGetMsgSubject(pt.subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// Entry seq is stored, so a replica that lags the stream answered
		// the direct get: the leader holds it.
		m, err = ejs.LeaderGet(ctx, pt.in.js, pt.in.cfg.Stream, ejs.MsgQuery{Seq: pos + 1, NextBySubject: pt.subject})
	}
	if err != nil {
		return false, fmt.Errorf("%w: entry after %d: %w", errRead, pos, err)
	}
	return m.Sequence == seq, nil
}

// fold handles one log entry past the aggregator's position: a tick, one
// occurrence, or a batch of them (HeaderBatch), folded in order at
// positions position(seq, k).
func (pt *partition) fold(msg jetstream.Msg, meta *jetstream.MsgMetadata) error {
	seq, at := meta.Sequence.Stream, meta.Timestamp
	pt.in.m.stage.WithLabelValues("consumer").Observe(max(time.Since(at), 0).Seconds())
	hdr := msg.Headers()
	pt.seq = seq
	pt.sinceCkpt++
	if hdr.Get(HeaderTick) != "" {
		pt.tickInFlight = false
		return pt.publish(pt.agg.Tick(at, position(seq, 0)), nil, -1, item{})
	}
	o := occ{at: at, seq: seq, reply: hdr.Get(HeaderReply), asIs: hdr.Get(HeaderAsIs) != "", hdr: hdr}
	if b := hdr.Get(HeaderBatch); b != "" {
		idxs, err := parseIndexes(b)
		var raws [][]byte
		var data []byte
		var pooled bool
		if err == nil {
			data, pooled, err = batchData(hdr, msg.Data())
		}
		if err == nil {
			raws, err = splitBatch(data, len(idxs))
		}
		if err != nil {
			// Not occurrences; the entry still takes its place in the log.
			pt.log.Error("undecodable intake entry skipped", "seq", seq, "err", err)
			return pt.publish(pt.agg.Tick(at, position(seq, 0)), nil, -1, item{})
		}
		// Occurrences of several calls (group commit): each to its own.
		var replies []string
		if rs := hdr.Get(HeaderReplies); rs != "" {
			if replies, err = replyRuns(rs, len(idxs)); err != nil {
				// Folded all the same; their calls get no decision.
				pt.log.Error("intake entry with unreadable replies: no decisions", "seq", seq, "err", err)
			}
		}
		pt.sinceCkpt += len(raws) - 1
		for k, raw := range raws {
			o.k, o.index, o.raw = k, idxs[k], raw
			if replies != nil {
				o.reply = replies[k]
			}
			if err := pt.occur(o); err != nil {
				return err
			}
		}
		// The occurrences' writes and decisions alias data until the
		// pipeline is done with them: it gives data back after them.
		if pooled {
			pt.pipe.add(item{release: func() { putEntryBuf(data) }})
		}
		return nil
	}
	idx, _ := strconv.ParseUint(hdr.Get(HeaderIndex), 10, 32)
	o.index, o.raw = uint32(idx), msg.Data()
	return pt.occur(o)
}

// occ is one occurrence of an intake entry: the k-th of entry seq,
// at index in its Submit batch.
type occ struct {
	at    time.Time
	seq   uint64
	k     int
	index uint32
	raw   []byte
	reply string
	asIs  bool
	hdr   nats.Header // the entry's
}

func (pt *partition) occur(o occ) error {
	pos := position(o.seq, o.k)
	// Aliased: the occurrence's bytes are its Created write, kept until
	// stored anyway; what the aggregator keeps longer it copies. Decoded
	// into the partition's reused event: its writes are published (their
	// subjects and headers built, an event without its bytes encoded)
	// before occur returns, and a decision keeps only strings of o.raw.
	ev, err := pt.dec.DecodeAliased(o.raw)
	if err != nil {
		// Not an occurrence; it still takes its place in the log.
		pt.log.Error("undecodable intake occurrence skipped", "seq", o.seq, "occurrence", o.k, "err", err)
		return pt.publish(pt.agg.Tick(o.at, pos), nil, -1, item{})
	}
	if ev.GetSeries() != nil || o.asIs {
		// Aggregated by its emitter: stored as it is, in log order with the
		// partition's writes, under an id that a replay reproduces.
		if err := pt.publish(pt.agg.Tick(o.at, pos), nil, -1, item{}); err != nil {
			return err
		}
		fut, err := pt.publishEvent(ev, nil, wire.ReasonClient, nil, clientWriteID(ev, o.seq, o.k), o.hdr)
		if err != nil {
			return err
		}
		pt.in.m.writes.WithLabelValues(wire.ReasonClient).Inc()
		pt.in.addStats(func(s *Stats) { s.ClientWrites++ })
		pt.pipe.add(item{fut: fut, reply: o.reply, hasDec: true, dec: decision{index: o.index, outcome: series.Created, uid: ev.GetUid()}})
		return nil
	}
	// The aggregator keeps a singleton encoded, and a Created write is the
	// occurrence's own bytes: no copy of the event, no second encoding.
	d, err := pt.agg.ObserveEncoded(ev, o.raw, o.at, pos)
	if err != nil {
		return fmt.Errorf("%w: %w", errRead, err)
	}
	own := -1
	if n := len(d.Writes); n > 0 && (d.Outcome == series.Created || d.Outcome == series.SeriesStarted) {
		own = n - 1 // the occurrence's own write comes last
	}
	return pt.publish(d.Writes, o.hdr, own, item{reply: o.reply, hasDec: true, dec: decision{index: o.index, outcome: d.Outcome, uid: d.UID}})
}

// reader reads occurrences back from the partition's log for the
// aggregator, which keeps a singleton's first occurrence only as its log
// position: a second occurrence that starts the series needs the first
// one's event. The entry read last is kept, since a batched entry holds
// many first occurrences.
func (pt *partition) reader(ctx context.Context) series.Reader {
	return func(pos uint64) ([]byte, error) {
		seq, k := pos>>posShift, int(pos&maxBatch)
		if seq != pt.readSeq || pt.readRaws == nil {
			raws, err := pt.readEntry(ctx, seq)
			if err != nil {
				return nil, err
			}
			pt.readSeq, pt.readRaws = seq, raws
		}
		if k >= len(pt.readRaws) {
			return nil, fmt.Errorf("intake entry %d has no occurrence %d", seq, k)
		}
		return pt.readRaws[k], nil
	}
}

// readEntry reads the occurrences of intake entry seq.
func (pt *partition) readEntry(ctx context.Context, seq uint64) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := pt.in.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// A replica that lags the stream may have answered the direct
		// get: the leader holds every entry still kept.
		m, err = ejs.LeaderGet(ctx, pt.in.js, pt.in.cfg.Stream, ejs.MsgQuery{Seq: seq})
	}
	if err != nil {
		return nil, fmt.Errorf("read intake entry %d: %w", seq, err)
	}
	if m.Subject != pt.subject {
		return nil, fmt.Errorf("intake entry %d is on %q, not this partition's", seq, m.Subject)
	}
	b := m.Header.Get(HeaderBatch)
	if b == "" {
		return [][]byte{m.Data}, nil
	}
	idxs, err := parseIndexes(b)
	if err != nil {
		return nil, err
	}
	// Not given back: the occurrences returned alias data.
	data, _, err := batchData(m.Header, m.Data)
	if err != nil {
		return nil, err
	}
	return splitBatch(data, len(idxs))
}

// clientWriteID is the events message id of an event stored as its emitter
// aggregated it: unique per occurrence of the intake, the same on a replay.
func clientWriteID(ev *eventgatev1.Event, seq uint64, k int) string {
	t := ev.GetTenant()
	id := t.GetType() + "/" + t.GetName() + "/" + ev.GetUid() + "/intake-" + strconv.FormatUint(seq, 10)
	if k > 0 {
		id += "." + strconv.Itoa(k)
	}
	return id
}

// publish sends writes to the events stream in order, then dec: with the
// write at index own, if any, whose sequence it reports; on its own
// otherwise. hdr is the intake entry's headers: its trace context goes to
// the entry's own write.
func (pt *partition) publish(ws []series.Write, hdr nats.Header, own int, dec item) error {
	for i, w := range ws {
		var trace nats.Header
		if i == own {
			trace = hdr
		}
		fut, err := pt.publishEvent(w.Event, w.Raw, w.Reason.String(), wireMinutes(w.Minutes), w.ID(), trace)
		if err != nil {
			return err
		}
		if i == own {
			dec.fut = fut
			pt.pipe.add(dec)
			dec = item{}
		} else {
			pt.pipe.add(item{fut: fut})
		}
	}
	if dec.hasDec {
		pt.pipe.add(dec)
	}
	return nil
}

// publishEvent publishes one version of a stored event, asynchronously;
// data is its encoding when at hand (nil: encode it). trace, when not nil,
// is the headers of the intake entry whose trace context it carries on.
func (pt *partition) publishEvent(ev *eventgatev1.Event, data []byte, reason string, minutes []wire.Minute, id string, trace nats.Header) (jetstream.PubAckFuture, error) {
	if pt.stored != nil {
		if pt.seq > pt.stored.until {
			pt.stored = nil
		} else if seq, ok := pt.stored.lookup(id); ok {
			pt.in.m.replayed.Inc()
			pt.in.addStats(func(s *Stats) { s.ReplayedStored++ })
			return newStoredAck(pt.in.cfg.EventsStream, seq), nil
		}
	}
	w := wire.Write{Event: ev, Data: data, ID: id, Reason: reason, Minutes: minutes}
	if trace != nil {
		w.Trace = propagator.Extract(context.Background(), propagation.HeaderCarrier(trace))
	}
	return pt.in.pub.Async(w)
}
