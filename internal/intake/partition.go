package intake

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventgate/eventgate/internal/event"
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

// A partition's code is split by concern: this file holds its state and
// the loop that competes for it; partition_ownership.go takes it over,
// hands it over and balances; partition_fold.go pulls its entries and folds
// them into writes and decisions; partition_checkpoint.go persists and
// restores; partition_tick.go and partition_stats.go keep its clock and its
// counters.

// partition competes for one intake partition and, while this replica owns
// it, aggregates it. Its fields are the run goroutine's, except the atomics.
type partition struct {
	in      *Intake
	p       int
	subject string
	cons    jetstream.Consumer
	log     *slog.Logger

	owned   atomic.Bool
	usage   chan tenantReq // TenantTracking's questions, answered by the owner
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
	// stored is which writes the events stream held when this owner took
	// over, until the replay passes the entries logged before (nil: none).
	stored    *storedWrites
	lastStats series.Stats
	budget    budgetLog // evictions at the series memory budget, logged at most every budgetLogEvery
	// chain: the last delivery was a first delivery with consumer sequence
	// chainDseq, already handled; the next one, if it has consumer sequence
	// chainDseq+1 and is a first delivery too, is the partition's next log
	// entry after it. See handle.
	chainOK   bool
	chainDseq uint64
	// The intake entry last read back for the aggregator (see reader).
	readSeq  uint64
	readRaws [][]byte
	// dec decodes each occurrence into one event, reused: nothing the
	// fold keeps or publishes later holds the event itself (see occur).
	dec event.Decoder
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
		usage:   make(chan tenantReq),
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
	if consumerGone(err) {
		pt.recreate(ctx)
	}
	backoff(ctx, 250*time.Millisecond)
}

// consumerGone reports whether a pull failed in a way that may mean the
// consumer no longer exists: deleted, or lost with the memory of the
// servers that held it (nobody answers its pull requests then).
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, nats.ErrNoResponders)
}

// recreate creates the partition's consumer again if it is gone. An owner
// gives the partition up first: the new consumer pins whichever replica
// pulls next, which takes it over from its checkpoint.
func (pt *partition) recreate(ctx context.Context) {
	if _, err := pt.in.stream.Consumer(ctx, consumerName(pt.p)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return
	}
	if pt.agg != nil {
		pt.log.Warn("intake consumer lost: giving the partition up")
		pt.drop()
	}
	cons, err := pt.in.ensureConsumer(ctx, pt.p)
	if err != nil {
		pt.log.Warn("intake consumer lost and not created again", "err", err)
		return
	}
	pt.log.Info("intake consumer created again")
	pt.cons = cons
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
