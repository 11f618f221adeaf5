// Package ingest copies the events stream into the event store, and
// knows the stream sequence up to which the store holds every event (its
// floor: the resourceVersion Query answers at).
//
// How follows from which replicas share a store. Replicas on one
// ClickHouse share one durable pull consumer (Consumer, DefaultConsumer),
// each message going to one of them; its ack floor is the store's floor.
// A replica on an embedded engine has a store of its own and copies the
// whole stream into it from its live feed, the one its watches read
// (Feed), keeping the floor in a file beside the store: N replicas are N
// full read replicas, each answering queries at its own floor, and none
// leaves state on the server when it goes. Such a store filled through a
// consumer by an earlier version adopts that consumer's ack floor.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// Writer is the store the stream is copied into.
type Writer interface {
	// Insert stores a batch. A batch is acknowledged only after Insert
	// returned nil and is retried otherwise, so inserting a version again
	// (same Seq) must be harmless. Insert must not keep the batch's slice
	// once it returned: the ingest fills it again with a later batch.
	// The live feed's rows come without their events (event.Stored):
	// Insert decodes them, and refuses a batch holding one that does not
	// decode with an *event.UndecodableError.
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
	cons   jetstream.Consumer
	w      Writer
	cfg    Config
	log    *slog.Logger
	m      *Metrics

	// alive is when the inserter last showed progress (an insert attempt
	// ended); the fetcher keeps a waiting batch only while it is recent.
	alive atomic.Int64

	lifecycle
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
	cons, err := openConsumer(ctx, js, stream, cfg)
	if err != nil {
		w.Close()
		return nil, err
	}
	in := &Consumer{
		js: js, stream: stream, cons: cons, w: w, cfg: cfg, log: log.With("consumer", cfg.Durable),
		m: newMetrics(reg),
	}
	// The caller's context ending aborts ingest (Stop is the graceful way).
	in.start(ctx, in.run, in.lagLoop)
	in.m.info.WithLabelValues(cfg.Durable, "").Set(1)
	in.log.Info("clickhouse ingest started", "stream", stream, "batch_size", cfg.BatchSize, "batch_wait", cfg.BatchWait)
	return in, nil
}

// openConsumer creates (or updates) the durable consumer.
func openConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg Config) (jetstream.Consumer, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   "eventgate: copies events into ClickHouse; the ack floor is what ClickHouse holds",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse ingest: consumer %s on %s: %w", cfg.Durable, stream, err)
	}
	return cons, nil
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
		start := time.Now()
		msgs, err := in.fetch()
		if err != nil {
			in.m.errors.WithLabelValues("fetch").Inc()
			in.log.Warn("clickhouse ingest: fetch failed; retrying", "err", err, "backoff", backoff)
			if !in.sleep(ctx, backoff, false) {
				return
			}
			backoff = min(2*backoff, in.cfg.MaxBackoff)
			continue
		}
		backoff = in.cfg.MinBackoff
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
		row, err := storedRow(md.Sequence.Stream, m.Subject(), m.Data(), m.Headers(), md.Timestamp, in.m, in.log)
		if err != nil {
			in.reject(m, md.Sequence.Stream, err)
			continue
		}
		b.rows = append(b.rows, row)
		b.msgs = append(b.msgs, m)
	}
	if len(b.rows) == 0 {
		return nil
	}
	return b
}

// storedRow decodes one message of the events stream into a row. The row
// aliases data.
func storedRow(seq uint64, subject string, data []byte, h nats.Header, stored time.Time, m *Metrics, log *slog.Logger) (event.Stored, error) {
	row := undecodedRow(seq, subject, data, h, stored, m, log)
	if err := decodeRow(&row); err != nil {
		return event.Stored{}, err
	}
	return row, nil
}

// undecodedRow is a message's row without its event: the writer decodes
// it from Raw as it copies the row into its columns (event.Stored), so
// that a batch holds the bytes it is inserted from, not every event
// decoded besides, and the store decodes each event into one it reuses.
func undecodedRow(seq uint64, subject string, data []byte, h nats.Header, stored time.Time, m *Metrics, log *slog.Logger) event.Stored {
	row := event.Stored{Seq: seq, Subject: subject, StoredAt: stored, Raw: data}
	if h != nil {
		row.WriteReason = h.Get(wire.HeaderWriteReason)
		if v := h.Get(wire.HeaderSeriesMinutes); v != "" {
			// A bad per-minute record does not lose the event: its
			// occurrences count at its eventTime instead.
			var err error
			if row.Minutes, err = wire.ParseMinutes(v); err != nil {
				m.errors.WithLabelValues("minutes").Inc()
				log.Warn("clickhouse ingest: per-minute record ignored", "seq", seq, "err", err)
				row.Minutes = nil
			}
		}
	}
	return row
}

// decodeRow decodes the row's event from its Raw (aliased).
func decodeRow(row *event.Stored) error {
	ev, err := event.UnmarshalAliased(row.Raw)
	if err != nil {
		return err
	}
	row.Event = ev
	return nil
}

// fetch pulls up to BatchSize messages, waiting at most BatchWait: the
// batch's size and time thresholds.
func (in *Consumer) fetch() ([]jetstream.Msg, error) {
	batch, err := in.cons.Fetch(in.cfg.BatchSize, jetstream.FetchMaxWait(in.cfg.BatchWait))
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
	lastProgress := time.Now()
	// Keep the batch ours while we retry.
	keep := func() {
		if time.Since(lastProgress) > in.cfg.AckWait/3 {
			for _, m := range msgs {
				m.InProgress()
			}
			lastProgress = time.Now()
		}
	}
	return insertRetrying(ctx, in.w, in.cfg, in.m, in.log, rows, func() { in.alive.Store(time.Now().UnixNano()) }, keep)
}

// insertRetrying inserts rows, retrying with backoff until it succeeds; it
// returns false when ctx ends first. attempted (if not nil) is called after
// each attempt, retrying before each wait for the next.
//
// A row the writer refuses as undecodable (event.UndecodableError, for a
// row passed without its event) is dropped, logged and counted, and the
// rest inserted at once: rows is changed in place.
func insertRetrying(ctx context.Context, w Writer, cfg Config, m *Metrics, log *slog.Logger, rows []event.Stored, attempted, retrying func()) bool {
	backoff := cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, cfg.InsertTimeout)
		err := w.Insert(actx, rows)
		cancel()
		if attempted != nil {
			attempted()
		}
		if rest, dropped := dropUndecodable(rows, err, m, log); dropped {
			if rows = rest; len(rows) == 0 {
				return true
			}
			attempt--
			continue
		}
		if err == nil {
			m.duration.Observe(time.Since(start).Seconds())
			m.rows.Add(float64(len(rows)))
			m.batches.Inc()
			if attempt > 1 {
				log.Info("clickhouse ingest: insert succeeded after retries", "attempts", attempt, "rows", len(rows))
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		m.errors.WithLabelValues("insert").Inc()
		log.Warn("clickhouse ingest: insert failed; retrying", "err", err, "rows", len(rows),
			"first_seq", rows[0].Seq, "attempt", attempt, "backoff", backoff)
		if retrying != nil {
			retrying()
		}
		// Holding a batch: only an abort ends the wait, not Stop.
		if !sleepJitter(ctx, backoff, nil) {
			return false
		}
		backoff = min(2*backoff, cfg.MaxBackoff)
	}
}

// dropUndecodable removes from rows the one err refuses as undecodable,
// if err is such a refusal of a row passed without its event; dropped
// reports whether it did.
func dropUndecodable(rows []event.Stored, err error, m *Metrics, log *slog.Logger) (rest []event.Stored, dropped bool) {
	var bad *event.UndecodableError
	if !errors.As(err, &bad) {
		return rows, false
	}
	i := slices.IndexFunc(rows, func(r event.Stored) bool { return r.Seq == bad.Seq && r.Event == nil })
	if i < 0 {
		return rows, false
	}
	m.errors.WithLabelValues("decode").Inc()
	log.Error("clickhouse ingest: undecodable message dropped", "seq", bad.Seq, "subject", rows[i].Subject, "err", bad.Err)
	return slices.Delete(rows, i, i+1), true
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
	stop := in.stop
	if holding {
		stop = nil
	}
	return sleepJitter(ctx, d, stop)
}

// sleepJitter waits about d (d/2 to d); false when ctx ends or stop is
// closed first.
func sleepJitter(ctx context.Context, d time.Duration, stop <-chan struct{}) bool {
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}
