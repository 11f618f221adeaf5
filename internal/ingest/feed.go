package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/watch"
)

// FeedConsumer is the name the ingest of a replica's own store goes by in
// its metrics and readiness: it has no consumer on the server.
const FeedConsumer = "live-feed"

// FloorFileName is the floor file's name beside the store (Config.FloorFile).
const FloorFileName = "ingest-floor"

// Feed fills a replica's own store (the embedded engine) from the replica's
// live feed, the one its watches read: every event crosses from the server
// to the gateway once, is read once and its bytes are shared, instead of
// also reaching the store through a consumer of its own.
//
// The store's floor (every event up to it is in the store) is kept in a
// file beside the store, written after each insert returned; it starts
// behind the truth after a crash, and what is inserted again is harmless
// (Writer.Insert). From the floor the ingest catches up by reading the
// stream (an ordered consumer, as a resumed watch replays), then takes the
// feed's messages from its tap; a tap that overflows while the store is
// slow leaves the feed, and the ingest catches up from the stream again.
type Feed struct {
	js     jetstream.JetStream
	stream string
	hub    *watch.Hub
	w      Writer
	cfg    Config
	log    *slog.Logger
	m      *Metrics
	// catchUps counts the reads of the stream (at start, and after the
	// tap overflowed).
	catchUps prometheus.Counter

	floor  atomic.Uint64 // in the store, and in the floor file
	cursor uint64        // handed to the inserter (the producer's)

	// spare holds the rows of batches inserted, emptied, for the producer
	// to fill again: a batch's rows are made at the batch size (20,000
	// rows of 120 bytes), and at the latency phase's rate a new one for
	// every batch was a tenth of what the gateway allocated.
	spare chan []event.Stored

	// idle holds a token while the inserter waits for a batch (it puts
	// one before each wait): a live batch that has waited BatchWait goes
	// to the inserter when it takes one, and until then it takes what
	// arrives, instead of waiting for a whole insert with what it holds.
	idle chan struct{}

	lifecycle
}

// feedBatch is a batch for the store and the last sequence it covers.
type feedBatch struct {
	rows []event.Stored
	last uint64
}

// StartFeed starts filling w from hub. It reads the floor from
// cfg.FloorFile; without one it adopts the ack floor of the store's
// consumer of earlier versions (cfg.Durable recording cfg.StoreID, then
// cfg.AdoptFrom) and deletes that consumer, or copies the whole stream.
// StartFeed owns w from then on, as Start does.
func StartFeed(ctx context.Context, js jetstream.JetStream, stream string, hub *watch.Hub, w Writer, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Feed, error) {
	cfg.withDefaults(w.Batch())
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.FloorFile == "" {
		w.Close()
		return nil, errors.New("clickhouse ingest: the live feed needs a floor file beside the store")
	}
	f := &Feed{js: js, stream: stream, hub: hub, w: w, cfg: cfg, log: log.With("ingest", FeedConsumer),
		m: newMetrics(reg), spare: make(chan []event.Stored, spareBatches), idle: make(chan struct{}, 1),
		catchUps: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_clickhouse_ingest_feed_catchups_total",
			Help: "Times the ingest of this replica's own store read the stream to catch up with its live feed: at start, and after it fell behind by more than its tap's buffer."})}
	if reg != nil {
		reg.MustRegister(f.catchUps)
	}
	floor, err := f.openFloor(ctx)
	if err != nil {
		w.Close()
		return nil, err
	}
	f.floor.Store(floor)
	f.cursor = floor
	f.m.ackFloor.Set(float64(floor))
	f.start(ctx, f.run, f.lagLoop)
	f.m.info.WithLabelValues(FeedConsumer, cfg.StoreID).Set(1)
	f.log.Info("clickhouse ingest started from the live feed", "stream", stream, "store", cfg.StoreID, "floor", floor,
		"batch_size", cfg.BatchSize, "batch_wait", cfg.BatchWait)
	return f, nil
}

// openFloor reads the floor file, or settles the floor of a store that
// has none yet and writes it.
func (f *Feed) openFloor(ctx context.Context) (uint64, error) {
	b, err := os.ReadFile(f.cfg.FloorFile)
	if err == nil {
		floor, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if perr == nil {
			return floor, nil
		}
		f.log.Warn("clickhouse ingest: unreadable floor file; copying the stream again from its start (what the store holds is inserted again, harmlessly)",
			"file", f.cfg.FloorFile, "err", perr)
		return 0, f.writeFloor(0)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("clickhouse ingest: floor file: %w", err)
	}
	floor, adopted, err := f.adoptFloor(ctx)
	if err != nil {
		return 0, err
	}
	// Kept before the consumer is deleted: a crash in between leaves a
	// floor, not a lost one.
	if err := f.writeFloor(floor); err != nil {
		return 0, err
	}
	if adopted != "" {
		if err := f.js.DeleteConsumer(ctx, f.stream, adopted); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			f.log.Warn("clickhouse ingest: the adopted consumer could not be deleted", "consumer", adopted, "err", err)
		}
		f.log.Info("clickhouse ingest: the live feed adopted the ack floor of the store's consumer", "consumer", adopted, "floor", floor)
	}
	return floor, nil
}

// adoptFloor returns the ack floor of the consumer that filled this store
// before (its own, recording its id; or the shared one it alone read), and
// that consumer's name; 0 and "" when there is none.
func (f *Feed) adoptFloor(ctx context.Context) (uint64, string, error) {
	for _, name := range []string{f.cfg.Durable, f.cfg.AdoptFrom} {
		if name == "" {
			continue
		}
		c, err := f.js.Consumer(ctx, f.stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return 0, "", fmt.Errorf("clickhouse ingest: consumer %s to adopt: %w", name, err)
		}
		info := c.CachedInfo()
		if name == f.cfg.Durable && info.Config.Metadata[MetadataStore] != f.cfg.StoreID {
			continue // another store's: nothing this one holds
		}
		return info.AckFloor.Stream, name, nil
	}
	return 0, "", nil
}

// writeFloor keeps floor in the floor file, written aside and renamed so
// that a crash leaves the old floor or the new one.
func (f *Feed) writeFloor(floor uint64) error {
	tmp := f.cfg.FloorFile + ".tmp"
	if err := os.WriteFile(tmp, strconv.AppendUint(nil, floor, 10), 0o640); err != nil {
		return fmt.Errorf("clickhouse ingest: floor file: %w", err)
	}
	if err := os.Rename(tmp, f.cfg.FloorFile); err != nil {
		return fmt.Errorf("clickhouse ingest: floor file: %w", err)
	}
	return nil
}

// AckFloor is the sequence up to which every event is in the store (or was
// undecodable and dropped): the resourceVersion to pass to Store.Query.
func (f *Feed) AckFloor(context.Context) (uint64, error) { return f.floor.Load(), nil }

// Lag returns the events of the stream not yet in the store and the age of
// the oldest of them (0 when caught up), refreshing the lag gauges.
func (f *Feed) Lag(ctx context.Context) (uint64, time.Duration, error) {
	s, err := f.js.Stream(ctx, f.stream)
	if err != nil {
		return 0, 0, fmt.Errorf("clickhouse ingest: stream: %w", err)
	}
	floor := f.floor.Load()
	f.m.ackFloor.Set(float64(floor))
	last := s.CachedInfo().State.LastSeq
	if last <= floor {
		f.m.pending.Set(0)
		f.m.oldestAge.Set(0)
		return 0, 0, nil
	}
	pending := last - floor
	f.m.pending.Set(float64(pending))
	m, err := s.GetMsg(ctx, floor+1, jetstream.WithGetMsgSubject(">"))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return pending, 0, nil
		}
		return pending, 0, fmt.Errorf("clickhouse ingest: oldest pending message: %w", err)
	}
	age := max(time.Since(m.Time), 0)
	f.m.oldestAge.Set(age.Seconds())
	return pending, age, nil
}

func (f *Feed) lagLoop(ctx context.Context) {
	t := time.NewTicker(f.cfg.LagInterval)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, f.cfg.LagInterval)
		if _, _, err := f.Lag(lctx); err != nil && ctx.Err() == nil {
			f.m.errors.WithLabelValues("lag").Inc()
		}
		cancel()
		select {
		case <-t.C:
		case <-f.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// run inserts the batches the producer hands over, in order, and keeps
// the floor after each.
func (f *Feed) run(ctx context.Context) {
	defer f.w.Close()
	batches := make(chan *feedBatch)
	go f.produce(ctx, batches)
	for {
		select {
		case f.idle <- struct{}{}:
		default: // one is there already
		}
		b, ok := <-batches
		if !ok {
			return
		}
		// The rows go without their events: the writer decodes each as it
		// copies it (undecodedRow), and an undecodable one is dropped.
		if len(b.rows) > 0 && !insertRetrying(ctx, f.w, f.cfg, f.m, f.log, b.rows, nil, nil) {
			f.cancel() // aborted: the producer ends too
			continue
		}
		f.recycle(b.rows)
		f.floor.Store(b.last)
		f.m.ackFloor.Set(float64(b.last))
		if err := f.writeFloor(b.last); err != nil {
			// The store holds the batch; a floor kept behind means it
			// is inserted again after a restart, harmlessly.
			f.m.errors.WithLabelValues("ack").Inc()
			f.log.Warn("clickhouse ingest: floor not kept", "err", err)
		}
	}
}

// produce hands batches to out until Stop or abort, then closes it: from
// the stream until it reaches the feed, then from the feed's tap.
func (f *Feed) produce(ctx context.Context, out chan<- *feedBatch) {
	defer close(out)
	for !f.stopping() && ctx.Err() == nil {
		// Caught up without a tap first: over a long catch-up a tap
		// would only overflow.
		if !f.catchUp(ctx, out, 0) {
			return
		}
		tap, head, err := f.hub.Tap(f.cfg.TapBuffer)
		if err != nil {
			// The feed stopped (the gateway is stopping): nothing more
			// arrives live.
			select {
			case <-f.stop:
			case <-ctx.Done():
			}
			return
		}
		ok := f.catchUp(ctx, out, head) && f.live(ctx, out, tap)
		tap.Close()
		if !ok {
			return
		}
	}
}

// catchUp reads the stream after the cursor up to sequence to (0: up to
// its end) and hands it over in batches. It returns false when ingest is
// stopping or aborted.
func (f *Feed) catchUp(ctx context.Context, out chan<- *feedBatch, to uint64) bool {
	backoff := f.cfg.MinBackoff
	for !f.stopping() && ctx.Err() == nil {
		end := to
		if end == 0 {
			s, err := f.js.Stream(ctx, f.stream)
			if err != nil {
				f.m.errors.WithLabelValues("fetch").Inc()
				f.log.Warn("clickhouse ingest: stream info failed; retrying", "err", err, "backoff", backoff)
				if !sleepJitter(ctx, backoff, f.stop) {
					return false
				}
				backoff = min(2*backoff, f.cfg.MaxBackoff)
				continue
			}
			end = s.CachedInfo().State.LastSeq
		}
		if f.cursor >= end {
			return true
		}
		f.catchUps.Inc()
		done, err := f.readStream(ctx, out, end)
		if err == nil {
			return done
		}
		f.m.errors.WithLabelValues("fetch").Inc()
		f.log.Warn("clickhouse ingest: reading the stream failed; retrying", "err", err, "after", f.cursor, "backoff", backoff)
		if !sleepJitter(ctx, backoff, f.stop) {
			return false
		}
		backoff = min(2*backoff, f.cfg.MaxBackoff)
	}
	return false
}

// readStream reads (cursor, to] through an ordered consumer. It returns
// true once it reached to (or found nothing more), false when stopped.
func (f *Feed) readStream(ctx context.Context, out chan<- *feedBatch, to uint64) (bool, error) {
	cons, err := f.js.OrderedConsumer(ctx, f.stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       f.cursor + 1,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return false, fmt.Errorf("ordered consumer: %w", err)
	}
	for !f.stopping() && ctx.Err() == nil {
		batch, err := cons.Fetch(f.cfg.BatchSize, jetstream.FetchMaxWait(max(f.cfg.BatchWait, time.Second)))
		if err != nil {
			return false, fmt.Errorf("fetch: %w", err)
		}
		b := f.newBatch()
		end := false
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				f.m.errors.WithLabelValues("decode").Inc()
				continue
			}
			seq := md.Sequence.Stream
			if seq <= f.cursor {
				continue
			}
			if seq > to {
				end = true
				break
			}
			f.add(b, seq, m.Subject(), m.Data(), m.Headers(), md.Timestamp)
			if md.NumPending == 0 || seq == to {
				end = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			if !f.handOver(ctx, out, b) {
				return false, nil
			}
			return false, fmt.Errorf("fetch: %w", err)
		}
		if !f.handOver(ctx, out, b) {
			return false, nil
		}
		if end || b.last == 0 {
			// Reached to, or nothing came within the wait (what is left
			// of (cursor, to] was removed from the stream).
			return true, nil
		}
	}
	return false, nil
}

// live hands over the tap's messages in batches: a batch is ready at
// BatchSize, or once it has waited BatchWait, and a ready batch goes to
// the inserter as soon as it waits, with what arrived until then. So
// while an insert takes longer than BatchWait (a loaded machine), the
// next batch gathers the events of the whole insert instead of waiting
// for it with those of BatchWait: each event waits for at most the
// insert before its own, and fewer, larger inserts take less CPU. It
// returns true when the tap overflowed (catch up again), false when
// ingest is stopping, aborted, or the feed stopped.
func (f *Feed) live(ctx context.Context, out chan<- *feedBatch, tap *watch.Tap) bool {
	var b *feedBatch
	ready := false // b has waited BatchWait
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	take := func() bool {
		items := tap.Take()
		for _, it := range items {
			if it.Seq <= f.cursor {
				continue
			}
			if b == nil {
				b = f.newBatch()
				ready = false
				wait.Reset(f.cfg.BatchWait)
			}
			f.add(b, it.Seq, it.Subject, it.Raw, it.Header, it.Stored)
			if len(b.rows) >= f.cfg.BatchSize {
				wait.Stop()
				if !f.handOver(ctx, out, b) {
					return false
				}
				b = nil
			}
		}
		tap.Recycle(items)
		return true
	}
	flush := func() bool {
		wait.Stop()
		if b == nil {
			return true
		}
		ok := f.handOver(ctx, out, b)
		b, ready = nil, false
		return ok
	}
	for {
		var idle chan struct{}
		if ready {
			idle = f.idle
		}
		select {
		case <-tap.Ready():
			if !take() {
				return false
			}
		case <-wait.C:
			// Handed over when the inserter waits (at once if it does).
			ready = b != nil
		case <-idle:
			// What came since the batch's first message is in the
			// queue: the tap woke no one for it.
			if !take() || !flush() {
				return false
			}
		case <-tap.Overflow():
			// What it queued before it overflowed is in order: take it,
			// then catch up from the stream.
			return take() && flush()
		case <-f.hub.Done():
			take()
			flush()
			select {
			case <-f.stop:
			case <-ctx.Done():
			}
			return false
		case <-f.stop:
			take()
			flush()
			return false
		case <-ctx.Done():
			return false
		}
		// Woken next by a batch's first message (which starts its wait)
		// or by the rest of the batch, not by every message.
		if b == nil {
			tap.WakeAt(1)
		} else {
			tap.WakeAt(f.cfg.BatchSize - len(b.rows))
		}
	}
}

// spareBatches is how many inserted batches' rows the feed keeps for the
// next ones: one filled while one waits for the inserter and one is
// inserted.
const spareBatches = 3

// newBatch is an empty batch, on the rows of an inserted one when there is
// one to spare.
func (f *Feed) newBatch() *feedBatch {
	select {
	case rows := <-f.spare:
		return &feedBatch{rows: rows}
	default:
		return &feedBatch{rows: make([]event.Stored, 0, f.cfg.BatchSize)}
	}
}

// recycle keeps an inserted batch's rows for a later batch, emptied (so
// that they hold no event or message), unless enough are kept already.
func (f *Feed) recycle(rows []event.Stored) {
	clear(rows)
	select {
	case f.spare <- rows[:0]:
	default:
	}
}

// add decodes one message into b; an undecodable one is dropped (its
// sequence still counts as covered).
func (f *Feed) add(b *feedBatch, seq uint64, subject string, data []byte, h nats.Header, stored time.Time) {
	f.cursor, b.last = seq, seq
	b.rows = append(b.rows, undecodedRow(seq, subject, data, h, stored, f.m, f.log))
}

// handOver gives b (if it covers anything) to the inserter; false when
// aborted first.
func (f *Feed) handOver(ctx context.Context, out chan<- *feedBatch, b *feedBatch) bool {
	if b == nil || b.last == 0 {
		return true
	}
	// A token the inserter left before this send is stale once it
	// takes b.
	select {
	case <-f.idle:
	default:
	}
	select {
	case out <- b:
		return true
	case <-ctx.Done():
		return false
	}
}
