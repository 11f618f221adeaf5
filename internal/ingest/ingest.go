// Package ingest copies the events stream into the event store through a
// durable JetStream pull consumer whose ack floor is the stream sequence up
// to which the store holds every event.
//
// Which replicas share a consumer follows which share a store. Replicas on
// one ClickHouse share one consumer (DefaultConsumer), each message going to
// one of them. A replica on an embedded engine has a store of its own, so
// it has a consumer of its own (StoreConsumer, named after its replica id,
// recording its store id) that copies the whole stream: N replicas are N
// full read replicas, and each answers queries at its own ack floor. The
// server deletes such a consumer once its replica has been gone for
// Config.ConsumerTTL. A single replica on embedded NATS that used the
// shared consumer before adopts its ack floor (Config.AdoptFrom).
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// Writer is the store the stream is copied into.
type Writer interface {
	// Insert stores a batch. A batch is acknowledged only after Insert
	// returned nil and is retried otherwise, so inserting a version again
	// (same Seq) must be harmless.
	Insert(ctx context.Context, batch []event.Stored) error
	// Batch is the batch size and the longest wait for a partial batch the
	// store is tuned for: the defaults of Config.BatchSize and BatchWait.
	Batch() (size int, wait time.Duration)
	// Close releases what the writer holds, once ingest has ended.
	Close()
}

// Consumer copies the events stream into ClickHouse through a durable pull
// consumer. A batch is acknowledged only after its INSERT returned, so the
// consumer's ack floor is a sequence up to which ClickHouse holds every
// event: the resourceVersion Query may answer for. If ClickHouse fails, the
// batch is retried with backoff and nothing is acknowledged; emits keep
// going into JetStream, and ingest catches up when ClickHouse is back.
type Consumer struct {
	js     jetstream.JetStream
	stream string
	// cons is replaced when a store's own consumer was deleted by the
	// server (its replica was gone longer than ConsumerTTL).
	cons atomic.Pointer[jetstream.Consumer]
	w    Writer
	cfg  Config
	log  *slog.Logger
	m    *Metrics

	// taken is set once the consumer is found recording another store:
	// fetching from it would take that store's events.
	taken atomic.Bool

	// alive is when the inserter last showed progress (an insert attempt
	// ended); the fetcher keeps a waiting batch only while it is recent.
	alive atomic.Int64

	stop   chan struct{} // closed by Stop: finish the batch in hand and return
	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// Start creates (or updates) the durable consumer on stream and starts
// copying it into w. Start owns w from then on: it closes w once ingest has
// ended, or at once when it fails. Metrics are registered with reg when it
// is not nil.
func Start(ctx context.Context, js jetstream.JetStream, stream string, w Writer, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Consumer, error) {
	cfg.withDefaults(w.Batch())
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cons, err := openConsumer(ctx, js, stream, cfg, log)
	if err != nil {
		w.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in := &Consumer{
		js: js, stream: stream, w: w, cfg: cfg, log: log.With("consumer", cfg.Durable),
		m: newMetrics(reg), stop: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
	}
	in.cons.Store(&cons)
	// The caller's context ending aborts ingest (Stop is the graceful way).
	stopWatch := context.AfterFunc(ctx, cancel)
	in.wg.Add(2)
	go func() {
		defer in.wg.Done()
		in.run(runCtx)
	}()
	go func() {
		defer in.wg.Done()
		in.lagLoop(runCtx)
	}()
	go func() {
		in.wg.Wait()
		stopWatch()
		cancel()
		close(in.done)
	}()
	in.m.info.WithLabelValues(cfg.Durable, cfg.StoreID).Set(1)
	in.log.Info("clickhouse ingest started", "stream", stream, "store", cfg.StoreID, "batch_size", cfg.BatchSize, "batch_wait", cfg.BatchWait)
	return in, nil
}

// openConsumer creates (or updates) the durable consumer. A store's own
// consumer found recording another store is deleted first: its ack floor
// speaks for a store that is gone.
func openConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg Config, log *slog.Logger) (jetstream.Consumer, error) {
	cc, err := consumerConfig(ctx, js, stream, cfg, true, log)
	if err != nil {
		return nil, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, cc)
	if err != nil {
		return nil, fmt.Errorf("clickhouse ingest: consumer %s on %s: %w", cfg.Durable, stream, err)
	}
	adopted(ctx, js, stream, cfg, cc, log)
	return cons, nil
}

// consumerConfig is the consumer's configuration. With replace, a store's
// own consumer found recording another store is deleted on the way;
// without, that is ErrConsumerTaken.
func consumerConfig(ctx context.Context, js jetstream.JetStream, stream string, cfg Config, replace bool, log *slog.Logger) (jetstream.ConsumerConfig, error) {
	cc := jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   "eventgate: copies events into ClickHouse; the ack floor is what ClickHouse holds",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
	}
	if cfg.StoreID != "" {
		cc.Description = "eventgate: copies every event into the store " + cfg.StoreID + "; the ack floor is what it holds"
		cc.InactiveThreshold = cfg.ConsumerTTL
		cc.Metadata = map[string]string{MetadataStore: cfg.StoreID}
		old, err := js.Consumer(ctx, stream, cfg.Durable)
		switch {
		case err == nil:
			if got := old.CachedInfo().Config.Metadata[MetadataStore]; got != cfg.StoreID {
				if !replace {
					return cc, fmt.Errorf("clickhouse ingest: consumer %s records store %q, this is %q: %w", cfg.Durable, got, cfg.StoreID, ErrConsumerTaken)
				}
				log.Warn("clickhouse ingest: the consumer records another store; recreating it from the start of the stream",
					"consumer", cfg.Durable, "store", cfg.StoreID, "recorded_store", got)
				if err := js.DeleteConsumer(ctx, stream, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
					return cc, fmt.Errorf("clickhouse ingest: delete consumer %s of another store: %w", cfg.Durable, err)
				}
			}
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return cc, fmt.Errorf("clickhouse ingest: consumer %s on %s: %w", cfg.Durable, stream, err)
		default:
			adopted, err := adoptFloor(ctx, js, stream, cfg)
			if err != nil {
				return cc, err
			}
			if adopted > 0 {
				cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
				cc.OptStartSeq = adopted + 1
			}
		}
	}
	return cc, nil
}

// adopted deletes the consumer whose ack floor the new one adopted.
func adopted(ctx context.Context, js jetstream.JetStream, stream string, cfg Config, cc jetstream.ConsumerConfig, log *slog.Logger) {
	if cc.OptStartSeq > 0 {
		if err := js.DeleteConsumer(ctx, stream, cfg.AdoptFrom); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			log.Warn("clickhouse ingest: the adopted consumer could not be deleted", "consumer", cfg.AdoptFrom, "err", err)
		}
		log.Info("clickhouse ingest: the store's own consumer adopted the ack floor of the shared one",
			"consumer", cfg.Durable, "adopted", cfg.AdoptFrom, "ack_floor", cc.OptStartSeq-1)
	}
}

// adoptFloor returns the ack floor of cfg.AdoptFrom, 0 when there is none.
func adoptFloor(ctx context.Context, js jetstream.JetStream, stream string, cfg Config) (uint64, error) {
	if cfg.AdoptFrom == "" || cfg.AdoptFrom == cfg.Durable {
		return 0, nil
	}
	old, err := js.Consumer(ctx, stream, cfg.AdoptFrom)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("clickhouse ingest: consumer %s to adopt: %w", cfg.AdoptFrom, err)
	}
	return old.CachedInfo().AckFloor.Stream, nil
}

// consumer is the current consumer handle.
func (in *Consumer) consumer() jetstream.Consumer { return *in.cons.Load() }

// reopen recreates a store's own consumer after the server deleted it
// (its replica was gone longer than ConsumerTTL, or an operator removed
// it): the new one starts from the beginning of the stream, which the
// store deduplicates. It reports whether the consumer was recreated.
func (in *Consumer) reopen(ctx context.Context) bool {
	if in.cfg.StoreID == "" {
		return false
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := in.js.Consumer(octx, in.stream, in.cfg.Durable); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false
	}
	cc, err := consumerConfig(octx, in.js, in.stream, in.cfg, false, in.log)
	if err != nil {
		if errors.Is(err, ErrConsumerTaken) {
			in.taken.Store(true)
		}
		in.log.Warn("clickhouse ingest: recreating the deleted consumer failed", "err", err)
		return false
	}
	// Create, not update: if another store's consumer took the name in
	// the meantime (the replica id used twice), it is not ours to change.
	cons, err := in.js.CreateConsumer(octx, in.stream, cc)
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerExists) {
			in.taken.Store(true)
		}
		in.log.Warn("clickhouse ingest: recreating the deleted consumer failed", "err", err)
		return false
	}
	adopted(octx, in.js, in.stream, in.cfg, cc, in.log)
	in.cons.Store(&cons)
	in.log.Warn("clickhouse ingest: the consumer had been deleted; recreated from the start of the stream")
	return true
}

// Stop ends ingest gracefully: the batch in hand is inserted and
// acknowledged, then the consumer stops. If ctx ends first (e.g. ClickHouse
// is down), the batch is abandoned unacknowledged — it is redelivered later,
// to this or another replica — and Stop returns ctx.Err().
func (in *Consumer) Stop(ctx context.Context) error {
	in.once.Do(func() { close(in.stop) })
	select {
	case <-in.done:
		return nil
	case <-ctx.Done():
		in.cancel()
		<-in.done
		return ctx.Err()
	}
}

// Done is closed when ingest has stopped.
func (in *Consumer) Done() <-chan struct{} { return in.done }

func (in *Consumer) stopping() bool {
	select {
	case <-in.stop:
		return true
	default:
		return false
	}
}

// batch is one fetched and decoded batch.
type batch struct {
	msgs    []jetstream.Msg // the messages of rows, in order
	rows    []event.Stored
	fetched time.Duration // fetch and decode time
}

// run is a two-stage pipeline: fetchLoop fetches and decodes batch N+1
// while this goroutine inserts and acknowledges batch N.
func (in *Consumer) run(ctx context.Context) {
	defer in.w.Close()
	batches := make(chan *batch)
	go in.fetchLoop(ctx, batches)
	for b := range batches {
		t0 := time.Now()
		if !in.insert(ctx, b.rows, b.msgs) {
			// Aborted: hand the messages back at once rather than after
			// AckWait.
			nakAll(b.msgs)
			continue
		}
		t1 := time.Now()
		in.ack(ctx, b.msgs)
		if in.log.Enabled(ctx, slog.LevelDebug) {
			in.log.Debug("clickhouse ingest: batch", "rows", len(b.rows), "first_seq", b.rows[0].Seq,
				"fetch_decode", b.fetched, "insert", t1.Sub(t0), "ack", time.Since(t1))
		}
	}
}

func nakAll(msgs []jetstream.Msg) {
	for _, m := range msgs {
		m.Nak()
	}
}

// fetchLoop feeds decoded batches to out until Stop or abort, then closes
// it. A batch waiting for an inserter that is retrying is kept alive with
// in-progress acks; if the inserter hangs, the batch is left to expire so
// that another replica takes it.
func (in *Consumer) fetchLoop(ctx context.Context, out chan<- *batch) {
	defer close(out)
	backoff := in.cfg.MinBackoff
	for !in.stopping() && ctx.Err() == nil {
		if in.taken.Load() {
			if !in.sleep(ctx, in.cfg.MaxBackoff, false) {
				return
			}
			continue
		}
		start := time.Now()
		msgs, err := in.fetch()
		if err != nil {
			in.m.errors.WithLabelValues("fetch").Inc()
			in.log.Warn("clickhouse ingest: fetch failed; retrying", "err", err, "backoff", backoff)
			if !in.sleep(ctx, backoff, false) {
				return
			}
			// After the backoff, not at once: whoever deleted the consumer
			// (another replica given the same id) has had time to make
			// its own, which must not be raced.
			if in.reopen(ctx) {
				backoff = in.cfg.MinBackoff
				continue
			}
			backoff = min(2*backoff, in.cfg.MaxBackoff)
			continue
		}
		backoff = in.cfg.MinBackoff
		if in.taken.Load() {
			// Learnt during the fetch: these belong to the other store.
			nakAll(msgs)
			continue
		}
		b := in.decode(msgs)
		if b == nil {
			continue
		}
		b.fetched = time.Since(start)
		if !in.handOver(ctx, out, b) {
			nakAll(b.msgs)
			return
		}
	}
}

func (in *Consumer) handOver(ctx context.Context, out chan<- *batch, b *batch) bool {
	t := time.NewTicker(in.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case out <- b:
			return true
		case <-t.C:
			if time.Since(time.Unix(0, in.alive.Load())) < in.cfg.AckWait/2 {
				for _, m := range b.msgs {
					m.InProgress()
				}
			}
		case <-ctx.Done():
			return false
		}
	}
}

// decode turns messages into rows; undecodable ones are terminated. It
// returns nil when nothing is left to insert.
func (in *Consumer) decode(msgs []jetstream.Msg) *batch {
	b := &batch{rows: make([]event.Stored, 0, len(msgs)), msgs: make([]jetstream.Msg, 0, len(msgs))}
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			in.reject(m, 0, fmt.Errorf("metadata: %w", err))
			continue
		}
		// Aliased: the row keeps the message's bytes (Raw) until inserted.
		ev, err := event.UnmarshalAliased(m.Data())
		if err != nil {
			in.reject(m, md.Sequence.Stream, err)
			continue
		}
		row := event.Stored{Seq: md.Sequence.Stream, Subject: m.Subject(), Event: ev, StoredAt: md.Timestamp, Raw: m.Data()}
		if h := m.Headers(); h != nil {
			row.WriteReason = h.Get(wire.HeaderWriteReason)
			if v := h.Get(wire.HeaderSeriesMinutes); v != "" {
				// A bad per-minute record does not lose the event: its
				// occurrences count at its eventTime instead.
				if row.Minutes, err = wire.ParseMinutes(v); err != nil {
					in.m.errors.WithLabelValues("minutes").Inc()
					in.log.Warn("clickhouse ingest: per-minute record ignored", "seq", md.Sequence.Stream, "err", err)
				}
			}
		}
		b.rows = append(b.rows, row)
		b.msgs = append(b.msgs, m)
	}
	if len(b.rows) == 0 {
		return nil
	}
	return b
}

// fetch pulls up to BatchSize messages, waiting at most BatchWait: the
// batch's size and time thresholds.
func (in *Consumer) fetch() ([]jetstream.Msg, error) {
	batch, err := in.consumer().Fetch(in.cfg.BatchSize, jetstream.FetchMaxWait(in.cfg.BatchWait))
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
		if len(msgs) == 0 {
			return nil, err
		}
		in.log.Debug("clickhouse ingest: fetch ended early", "err", err, "messages", len(msgs))
	}
	return msgs, nil
}

// reject terminates a message that can never be inserted, so that it does
// not block ingest.
func (in *Consumer) reject(m jetstream.Msg, seq uint64, err error) {
	in.m.errors.WithLabelValues("decode").Inc()
	in.log.Error("clickhouse ingest: undecodable message dropped", "seq", seq, "subject", m.Subject(), "err", err)
	if err := m.TermWithReason("eventgate: undecodable event"); err != nil {
		in.m.errors.WithLabelValues("ack").Inc()
	}
}

func (in *Consumer) insert(ctx context.Context, rows []event.Stored, msgs []jetstream.Msg) bool {
	backoff := in.cfg.MinBackoff
	lastProgress := time.Now()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, in.cfg.InsertTimeout)
		err := in.w.Insert(actx, rows)
		cancel()
		in.alive.Store(time.Now().UnixNano())
		if err == nil {
			in.m.duration.Observe(time.Since(start).Seconds())
			in.m.rows.Add(float64(len(rows)))
			in.m.batches.Inc()
			if attempt > 1 {
				in.log.Info("clickhouse ingest: insert succeeded after retries", "attempts", attempt, "rows", len(rows))
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		in.m.errors.WithLabelValues("insert").Inc()
		in.log.Warn("clickhouse ingest: insert failed; retrying", "err", err, "rows", len(rows),
			"first_seq", rows[0].Seq, "attempt", attempt, "backoff", backoff)
		// Keep the batch ours while we retry.
		if time.Since(lastProgress) > in.cfg.AckWait/3 {
			for _, m := range msgs {
				m.InProgress()
			}
			lastProgress = time.Now()
		}
		if !in.sleep(ctx, backoff, true) {
			return false
		}
		backoff = min(2*backoff, in.cfg.MaxBackoff)
	}
}

// ack acknowledges a committed batch: one ack per message, the last one
// confirmed by the server, which processes a connection's acks in order.
// A cumulative ack (AckAll) would also acknowledge messages delivered and
// never inserted: those delivered to other replicas sharing the consumer,
// and, even on a store's own consumer, those delivered to a process killed
// before it inserted them or to a fetch that ended before they arrived,
// which the server is to deliver again after AckWait (TestCrashWhileIngesting
// lost acknowledged events with it).
func (in *Consumer) ack(ctx context.Context, msgs []jetstream.Msg) {
	for _, m := range msgs[:len(msgs)-1] {
		if err := m.Ack(); err != nil {
			in.m.errors.WithLabelValues("ack").Inc()
		}
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := msgs[len(msgs)-1].DoubleAck(actx); err != nil {
		// The batch is in ClickHouse; an ack lost here means a
		// redelivery, which queries deduplicate.
		in.m.errors.WithLabelValues("ack").Inc()
		in.log.Warn("clickhouse ingest: ack not confirmed", "err", err)
	}
}

// sleep waits d (with jitter); it returns false when ingest is aborted, and
// also when stopping unless retrying a batch in hand.
func (in *Consumer) sleep(ctx context.Context, d time.Duration, holding bool) bool {
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	stop := in.stop
	if holding {
		stop = nil
	}
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}
