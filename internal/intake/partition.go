package intake

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/series"
)

// Causes of a resync, for errors and metrics.
var (
	errGap        = errors.New("gap in the partition's deliveries")
	errPinChanged = errors.New("partition pinned anew")
	errRead       = errors.New("cannot read the intake")
)

// pinChange is errPinChanged with the new pin.
type pinChange struct{ pin string }

func (e *pinChange) Error() string        { return errPinChanged.Error() + ": " + e.pin }
func (e *pinChange) Is(target error) bool { return target == errPinChanged }

// partition competes for one intake partition and, while this replica owns
// it, aggregates it. Its fields are the run goroutine's, except the atomics.
type partition struct {
	in      *Intake
	p       int
	subject string
	cons    jetstream.Consumer
	log     *slog.Logger

	owned   atomic.Bool
	nkeys   atomic.Int64
	nseries atomic.Int64
	nbytes  atomic.Int64

	// Owner state: agg is nil when this replica does not own the partition.
	pin     string
	agg     *series.Aggregator
	rev     uint64 // revision of the head this owner last wrote
	head    head
	ckptPos uint64
	// seq is the intake sequence of the last entry folded: the consumer
	// resumes after it. (The aggregator's positions are finer: position.)
	seq       uint64
	ckptAt    time.Time
	sinceCkpt int
	pipe      *pipeline
	ckpt      *ckptJob // the checkpoint being written, if any
	lastStats series.Stats
	// chain: the last delivery was a first delivery with consumer sequence
	// chainDseq, already handled; the next one, if it has consumer sequence
	// chainDseq+1 and is a first delivery too, is the partition's next log
	// entry after it. See handle.
	chainOK   bool
	chainDseq uint64
	// The intake entry last read back for the aggregator (see reader).
	readSeq  uint64
	readRaws [][]byte
	// Ticks: when the last one was put in the log, and whether it is still
	// to be consumed.
	tickAt       time.Time
	tickInFlight bool
	idle         time.Duration // how long a candidate has seen nothing
	ownedSince   time.Time
}

func newPartition(in *Intake, p int, cons jetstream.Consumer) *partition {
	return &partition{
		in:      in,
		p:       p,
		subject: in.cfg.subject(p),
		cons:    cons,
		log:     in.log.With("partition", p),
	}
}

// run competes for the partition, and owns it when pinned, until ctx ends.
func (pt *partition) run(ctx context.Context) {
	defer pt.release()
	for ctx.Err() == nil && !pt.in.nc.IsClosed() {
		if pt.agg == nil {
			pt.compete(ctx)
		} else {
			pt.own(ctx)
		}
	}
}

// backoff pauses after an error, unless ctx ends first.
func backoff(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// fetch sends one pull request in the owners' priority group, waiting at
// most wait. The batch's channel closes only once the server is done with
// the request (it expired or is complete): after that, nothing more is
// delivered to it, so a rewind cannot lose deliveries to it.
func (pt *partition) fetch(n int, wait time.Duration) (jetstream.MessageBatch, error) {
	return pt.cons.Fetch(n, jetstream.FetchMaxWait(wait), jetstream.FetchPriorityGroup(ownerGroup))
}

// drain discards the rest of a batch, until the server is done with it.
func drain(ctx context.Context, msgs <-chan jetstream.Msg) {
	for {
		select {
		case _, ok := <-msgs:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// compete pulls one entry in the owners' priority group. The server gives
// it to this replica only when no other one holds the partition's pin; the
// entry then carries the new pin id, and this replica takes over.
func (pt *partition) compete(ctx context.Context) {
	wait := pt.in.waitMax
	if int(pt.in.members.owned.Load()) >= pt.in.members.fairShare(pt.in.cfg.Partitions) {
		// Enough partitions here: leave this one to the other replicas,
		// unless nobody holds it.
		backoff(ctx, wait)
		pt.idle += wait
		if pt.idle < pt.in.cfg.PinnedTTL {
			return
		}
		pt.idle = 0
		if !pt.wakeIfUnowned(ctx) {
			return
		}
	}
	batch, err := pt.fetch(1, wait)
	if err != nil {
		pt.fetchFailed(ctx, err)
		return
	}
	var msg jetstream.Msg
	select {
	case m, ok := <-batch.Messages():
		if ok {
			msg = m
		}
	case <-ctx.Done():
		return
	}
	if msg == nil {
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrPinIDMismatch) {
			pt.fetchFailed(ctx, err)
			return
		}
		pt.idle += wait
		if pt.idle >= pt.in.cfg.PinnedTTL {
			pt.idle = 0
			pt.wakeIfUnowned(ctx)
		}
		return
	}
	pt.idle = 0
	// The entry is not handled here: the takeover rewinds the consumer to
	// the checkpoint, which is at or before it. (The request, for one
	// entry, is complete: it cannot swallow what the rewind delivers.)
	pt.takeover(ctx, msg.Headers().Get(pinHeader), "pinned")
}

func (pt *partition) fetchFailed(ctx context.Context, err error) {
	if ctx.Err() != nil || pt.in.nc.IsClosed() {
		return
	}
	pt.log.Debug("intake fetch", "err", err)
	backoff(ctx, 250*time.Millisecond)
}

// wakeIfUnowned puts a tick in a partition nobody owns (its owner died or
// stopped), and reports whether it did: the tick gets a replica pinned,
// which restores the partition and writes whatever fell due meanwhile
// (finishes most of all).
func (pt *partition) wakeIfUnowned(ctx context.Context) bool {
	info, err := pt.cons.Info(ctx)
	if err != nil {
		return false
	}
	for _, g := range info.PriorityGroups {
		if g.Group == ownerGroup && g.PinnedClientID != "" {
			return false
		}
	}
	pt.publishTick()
	return true
}

// pinned reports whether the server still pins the partition to pin.
func (pt *partition) pinned(ctx context.Context) (bool, error) {
	info, err := pt.cons.Info(ctx)
	if err != nil {
		return false, err
	}
	for _, g := range info.PriorityGroups {
		if g.Group == ownerGroup {
			return g.PinnedClientID == pt.pin, nil
		}
	}
	return false, nil
}

// takeover makes this replica the partition's owner under pin: restore the
// latest checkpoint, claim it (a compare-and-set that fences off any
// previous owner's later checkpoints), and rewind the consumer to the entry
// after it. Only then are entries handled again.
func (pt *partition) takeover(ctx context.Context, pin, cause string) {
	pt.drop()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			backoff(ctx, time.Duration(min(attempt, 10))*50*time.Millisecond)
		}
		if attempt == 20 {
			pt.log.Error("partition takeover keeps failing; leaving it to another replica")
			return
		}
		snap, h, rev, err := pt.in.store.load(ctx, pt.p)
		if err != nil {
			pt.log.Warn("takeover: read checkpoint", "err", err)
			continue
		}
		var agg *series.Aggregator
		if snap == nil {
			agg, err = series.New(pt.in.cfg.Series)
			if err == nil {
				snap, err = agg.Snapshot()
			}
			h = head{inline: snap}
			h.size, h.crc = uint64(len(snap)), crcOf(snap)
		} else {
			agg, err = series.RestoreCheckpoint(pt.in.cfg.Series, snap, func(id uint64) ([]byte, error) {
				return pt.in.store.segment(ctx, pt.p, h, id)
			})
		}
		if err != nil {
			pt.log.Error("takeover: restore checkpoint", "err", err)
			continue
		}
		agg.SetReader(pt.reader(ctx))
		h.owner = pin
		newRev, err := pt.in.store.putHead(ctx, pt.p, h, rev)
		if err != nil {
			pt.log.Debug("takeover: claim checkpoint", "err", err)
			continue
		}
		if _, err := pt.in.stream.ResetConsumerToSequence(ctx, consumerName(pt.p), h.logSeq+1); err != nil {
			pt.log.Warn("takeover: rewind consumer", "err", err)
			continue
		}

		pt.pin, pt.agg, pt.rev, pt.head, pt.seq = pin, agg, newRev, h, h.logSeq
		pt.ckptPos, pt.ckptAt, pt.sinceCkpt = agg.Position(), time.Now(), 0
		pt.pipe = newPipeline(pt.in.nc, pt.in.deliverLocal, pt.in.m.stage.WithLabelValues("write"))
		pt.lastStats = series.Stats{}
		pt.chainOK, pt.tickInFlight = false, false
		pt.owned.Store(true)
		pt.ownedSince = time.Now()
		pt.in.members.owned.Add(1)
		pt.in.m.owned.Inc()
		pt.in.m.takeovers.Inc()
		pt.in.addStats(func(s *Stats) { s.Takeovers++ })
		pt.updateGauges()
		if err := pt.in.store.purgeUnnamed(ctx, pt.p, h); err != nil {
			pt.log.Warn("purge old checkpoint chunks", "err", err)
		}
		pt.log.Info("partition taken over", "cause", cause, "entry", h.logSeq, "keys", agg.Stats().Keys)
		return
	}
}

// drop forgets the partition's state (it is owned elsewhere now, or will be
// restored). Writes already handed to the pipeline still complete.
func (pt *partition) drop() {
	if pt.agg == nil {
		return
	}
	pt.pipe.close()
	// A checkpoint still being written ends by itself: stored, or fenced
	// off by the compare-and-set when someone claimed the head meanwhile.
	pt.pipe, pt.agg, pt.pin, pt.ckpt = nil, nil, "", nil
	pt.readSeq, pt.readRaws = 0, nil
	pt.owned.Store(false)
	pt.in.members.owned.Add(-1)
	pt.in.m.owned.Dec()
	pt.in.m.active.Sub(float64(pt.nseries.Swap(0)))
	pt.in.m.tracked.Sub(float64(pt.nkeys.Swap(0)))
	pt.in.m.bytes.Sub(float64(pt.nbytes.Swap(0)))
}

// release ends the run: after Stop, a graceful handover; after a crash of
// the connection, nothing.
func (pt *partition) release() {
	if pt.agg == nil {
		return
	}
	pipe := pt.pipe
	defer func() { <-pipe.done }()
	sc := pt.in.stopCtx.Load()
	if sc == nil || pt.in.nc.IsClosed() {
		pt.drop()
		return
	}
	if err := pt.handover(*sc); err != nil {
		pt.in.stopFailed(fmt.Errorf("partition %d: %w", pt.p, err))
	}
}

// handover gives the partition up gracefully: a checkpoint, then the pin
// is released and a tick put in the log, so that another replica takes
// over at once and continues exactly where this one stands.
func (pt *partition) handover(ctx context.Context) error {
	defer pt.drop()
	if err := pt.checkpoint(ctx); err != nil {
		return fmt.Errorf("handover checkpoint: %w", err)
	}
	if err := pt.in.stream.UnpinConsumer(ctx, consumerName(pt.p), ownerGroup); err != nil {
		pt.log.Warn("handover: unpin", "err", err)
	}
	if f := pt.publishTick(); f != nil {
		// Stored before Stop returns and the caller closes the connection.
		select {
		case <-f.Ok():
		case <-f.Err():
		case <-ctx.Done():
		}
	}
	pt.log.Info("partition handed over", "entry", pt.seq)
	return nil
}

// rebalance hands the partition over when this replica owns more than its
// share: one partition at a time across the replica, each owned for a
// while first.
func (pt *partition) rebalance(ctx context.Context) {
	m := pt.in.members
	every := pt.in.cfg.PinnedTTL / 2
	if int(m.owned.Load()) <= m.fairShare(pt.in.cfg.Partitions) || time.Since(pt.ownedSince) < every || !m.mayRelease(every) {
		return
	}
	if err := pt.handover(ctx); err != nil {
		pt.log.Warn("rebalance", "err", err)
	}
}

// fetchWait is how long an owner's pull may wait: short enough to keep its
// pin and to put a tick in the log soon after a write falls due.
func (pt *partition) fetchWait() time.Duration {
	w := pt.in.waitMax
	if due, ok := pt.agg.NextDue(); ok {
		w = min(w, max(time.Until(due)+5*time.Millisecond, 50*time.Millisecond))
	}
	return w
}

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
	for attempt := 0; ; attempt++ {
		m, err := pt.in.stream.GetMsg(ctx, pos+1, jetstream.WithGetMsgSubject(pt.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) && attempt < 5 {
			// A lagging replica answered the direct get: it will catch up.
			backoff(ctx, time.Duration(attempt+1)*20*time.Millisecond)
			continue
		}
		if err != nil {
			return false, fmt.Errorf("%w: entry after %d: %w", errRead, pos, err)
		}
		return m.Sequence == seq, nil
	}
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
		if err == nil {
			raws, err = splitBatch(msg.Data(), len(idxs))
		}
		if err != nil {
			// Not occurrences; the entry still takes its place in the log.
			pt.log.Error("undecodable intake entry skipped", "seq", seq, "err", err)
			return pt.publish(pt.agg.Tick(at, position(seq, 0)), nil, -1, item{})
		}
		pt.sinceCkpt += len(raws) - 1
		for k, raw := range raws {
			o.k, o.index, o.raw = k, idxs[k], raw
			if err := pt.occur(o); err != nil {
				return err
			}
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
	ev, err := event.Unmarshal(o.raw)
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
		fut, err := pt.publishEvent(ev, nil, ReasonClient, nil, clientWriteID(ev, o.seq, o.k), o.hdr)
		if err != nil {
			return err
		}
		pt.in.m.writes.WithLabelValues(ReasonClient).Inc()
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
	for attempt := 0; ; attempt++ {
		m, err := pt.in.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) && attempt < 5 {
			// A lagging replica answered the direct get: it will catch up.
			backoff(ctx, time.Duration(attempt+1)*20*time.Millisecond)
			continue
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
		return splitBatch(m.Data, len(idxs))
	}
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
	w := wire.Write{Event: ev, Data: data, ID: id, Reason: reason, Minutes: minutes}
	if trace != nil {
		w.Trace = propagator.Extract(context.Background(), propagation.HeaderCarrier(trace))
	}
	return pt.in.pub.Async(w)
}

// A checkpoint persists the aggregator, as the series protocol says: once
// every write issued before it is acknowledged, its snapshot goes to the
// partition's head, compare-and-set on the revision this owner last wrote.
// (The consumer acknowledges nothing: a takeover rewinds it to the head's
// position.) Only the snapshot is taken on the owner's goroutine; the wait
// for the writes and the stores run beside it (a ckptJob), so that the
// partition's occurrences are not held up while its checkpoint is written:
// at a high rate of distinct events a checkpoint carries megabytes of
// singletons, and writing them took tens of milliseconds, during which
// every occurrence of the partition waited. One checkpoint is written at a
// time; the next one starts from the head it wrote.
type ckptJob struct {
	done  chan struct{} // closed when the job ended
	start time.Time
	// Set before done is closed: the new head and its revision, or why
	// the checkpoint was not stored.
	head head
	rev  uint64
	err  error
}

// ckptTimeout bounds the writing of one checkpoint. A checkpoint that does
// not complete in time failed: the owner restores the previous one.
const ckptTimeout = 30 * time.Second

// startCheckpoint snapshots the aggregator and starts writing the
// checkpoint, unless the position has not moved since the last one or a
// checkpoint is still being written (a later call starts it then). It
// returns the error of a checkpoint that failed since the last call: the
// owner must then restore its previous checkpoint (resync), since the
// aggregator counts what a checkpoint carried as persisted.
func (pt *partition) startCheckpoint(ctx context.Context) error {
	if err := pt.reapCheckpoint(ctx, false); err != nil || pt.ckpt != nil {
		return err
	}
	pos := pt.agg.Position()
	if pos == pt.ckptPos {
		pt.ckptAt = time.Now()
		return nil
	}
	// Incremental: the singletons created since the previous checkpoint,
	// the series, and which earlier segments still count.
	issued := pt.pipe.issued
	cp, err := pt.agg.Checkpoint()
	if err != nil {
		return err
	}
	job := &ckptJob{done: make(chan struct{}), start: time.Now()}
	pt.ckpt = job
	pt.ckptPos, pt.ckptAt, pt.sinceCkpt = pos, time.Now(), 0
	prev, rev, seq, pin, pipe := pt.head, pt.rev, pt.seq, pt.pin, pt.pipe
	// Not the run's context: a checkpoint under way when the replica stops
	// completes, and the handover's checkpoint follows it.
	jctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ckptTimeout)
	go func() {
		defer close(job.done)
		defer cancel()
		if err := pipe.waitAcked(jctx, issued); err != nil {
			job.err = fmt.Errorf("writes not acknowledged: %w", err)
			return
		}
		if f := pt.in.beforeSave.Load(); f != nil {
			(*f)(pt.p)
		}
		h, r, err := pt.in.store.save(jctx, pt.p, cp, prev, pos, seq, pin, rev)
		if err != nil {
			job.err = err
			return
		}
		job.head, job.rev = h, r
		if err := pt.in.store.purgeGens(jctx, pt.p, garbage(prev, h)); err != nil {
			pt.log.Warn("purge old checkpoint chunks", "err", err)
		}
		pt.in.m.checkpoint.Observe(time.Since(job.start).Seconds())
		pt.in.addStats(func(s *Stats) { s.Checkpoints++ })
	}()
	return nil
}

// reapCheckpoint takes in the checkpoint being written, if any, once it has
// ended: at once, or (wait) when it ends. It returns the checkpoint's error
// (see startCheckpoint), or ctx's when ctx ends first.
func (pt *partition) reapCheckpoint(ctx context.Context, wait bool) error {
	job := pt.ckpt
	if job == nil {
		return nil
	}
	if wait {
		select {
		case <-job.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	} else {
		select {
		case <-job.done:
		default:
			return nil
		}
	}
	pt.ckpt = nil
	if job.err != nil {
		return job.err
	}
	pt.head, pt.rev = job.head, job.rev
	return nil
}

// checkpoint writes a checkpoint of where the partition stands now and
// waits for it (and for the one being written, if any).
func (pt *partition) checkpoint(ctx context.Context) error {
	if err := pt.reapCheckpoint(ctx, true); err != nil {
		return err
	}
	if err := pt.startCheckpoint(ctx); err != nil {
		return err
	}
	return pt.reapCheckpoint(ctx, true)
}

// resync recovers from cause while owning: a gap is mended by rewinding the
// consumer to the entry after the aggregator's position; anything else (a
// write or checkpoint that failed, a lost compare-and-set, a new pin) by a
// takeover from the latest checkpoint — if the server still pins this
// replica.
func (pt *partition) resync(ctx context.Context, cause error) {
	if ctx.Err() != nil || pt.in.nc.IsClosed() {
		return
	}
	label := "checkpoint"
	switch {
	case errors.Is(cause, errGap):
		label = "gap"
	case errors.Is(cause, errPinChanged):
		label = "pin"
	case errors.Is(cause, ErrFenced):
		label = "fenced"
	case errors.Is(cause, errRead):
		label = "read"
	}
	pt.in.m.resyncs.WithLabelValues(label).Inc()
	pt.in.addStats(func(s *Stats) { s.Resyncs++ })
	if pc := (*pinChange)(nil); errors.As(cause, &pc) {
		pt.log.Info("partition pinned anew: restoring", "cause", cause)
		pt.takeover(ctx, pc.pin, label)
		return
	}
	ok, err := pt.pinned(ctx)
	if err != nil || !ok {
		pt.log.Info("partition lost", "cause", cause, "err", err)
		pt.drop()
		return
	}
	if errors.Is(cause, errGap) {
		pt.log.Warn("gap in the partition's deliveries: rewinding", "cause", cause)
		if _, err := pt.in.stream.ResetConsumerToSequence(ctx, consumerName(pt.p), pt.seq+1); err != nil {
			pt.log.Warn("rewind consumer", "err", err)
			pt.takeover(ctx, pt.pin, label)
			return
		}
		pt.chainOK = false
		return
	}
	pt.log.Warn("partition resync from its checkpoint", "cause", cause)
	pt.takeover(ctx, pt.pin, label)
}

// maybeTick puts a tick in the log when a write fell due by the wall clock
// and nothing came to trigger it: at most one in flight, at most one every
// 250ms.
func (pt *partition) maybeTick() {
	due, ok := pt.agg.NextDue()
	if !ok {
		return
	}
	now := time.Now()
	if now.Before(due) || now.Sub(pt.tickAt) < 250*time.Millisecond {
		return
	}
	if pt.tickInFlight && now.Sub(pt.tickAt) < 2*time.Second {
		return
	}
	pt.publishTick()
	pt.tickAt, pt.tickInFlight = now, true
}

// publishTick puts a tick entry in the partition's log; it is lost
// harmlessly if the publish fails. The future is nil then.
func (pt *partition) publishTick() jetstream.PubAckFuture {
	m := nats.NewMsg(pt.subject)
	m.Header.Set(HeaderTick, "1")
	f, err := pt.in.js.PublishMsgAsync(m, jetstream.WithExpectStream(pt.in.cfg.Stream))
	if err != nil {
		pt.log.Debug("publish tick", "err", err)
		return nil
	}
	pt.in.m.ticks.Inc()
	pt.in.addStats(func(s *Stats) { s.Ticks++ })
	return f
}

// syncStats adds the aggregator's counters since the last call to the
// intake's, and logs evictions at the series cap.
func (pt *partition) syncStats() {
	if pt.agg == nil {
		return
	}
	s, l := pt.agg.Stats(), pt.lastStats
	pt.lastStats = s
	d := series.Stats{
		Occurrences:       s.Occurrences - l.Occurrences,
		Folded:            s.Folded - l.Folded,
		Duplicates:        s.Duplicates - l.Duplicates,
		EvictedSingletons: s.EvictedSingletons - l.EvictedSingletons,
		Reads:             s.Reads - l.Reads,
		Collisions:        s.Collisions - l.Collisions,
	}
	for r := range d.Writes {
		d.Writes[r] = s.Writes[r] - l.Writes[r]
	}
	pt.in.addStats(func(t *Stats) {
		t.Occurrences += d.Occurrences
		t.Folded += d.Folded
		t.Duplicates += d.Duplicates
		t.EvictedSingletons += d.EvictedSingletons
		t.FirstReads += d.Reads
		for r := range d.Writes {
			t.Writes[r] += d.Writes[r]
		}
	})
	m := pt.in.m
	m.occurrences.Add(float64(d.Occurrences))
	m.folded.Add(float64(d.Folded))
	m.saved.Add(float64(d.Folded))
	m.evicted.Add(float64(d.EvictedSingletons))
	m.reads.Add(float64(d.Reads))
	m.collisions.Add(float64(d.Collisions))
	for r := range d.Writes {
		if d.Writes[r] > 0 {
			m.writes.WithLabelValues(series.Reason(r).String()).Add(float64(d.Writes[r]))
		}
	}
	if d.EvictedSingletons > 0 || d.Writes[series.ReasonEvicted] > 0 {
		pt.log.Warn("series memory budget reached: singletons forgotten early, series finished early with their exact counts",
			"maxBytes", pt.agg.Config().MaxBytes, "maxActive", pt.agg.Config().MaxActive, "singletons", d.EvictedSingletons, "series", d.Writes[series.ReasonEvicted])
	}
	pt.updateGauges()
}

func (pt *partition) updateGauges() {
	s := pt.agg.Stats()
	pt.in.m.active.Add(float64(int64(s.Series) - pt.nseries.Swap(int64(s.Series))))
	pt.in.m.tracked.Add(float64(int64(s.Keys) - pt.nkeys.Swap(int64(s.Keys))))
	pt.in.m.bytes.Add(float64(s.Bytes - pt.nbytes.Swap(s.Bytes)))
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
