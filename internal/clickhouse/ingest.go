package clickhouse

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

// DefaultIngestConsumer is the durable consumer every gateway replica
// shares: each message is delivered to one replica, and the consumer's ack
// floor says what ClickHouse holds.
const DefaultIngestConsumer = "clickhouse-ingest"

// IngestConfig tunes the ingest consumer. Zero values take defaults.
type IngestConfig struct {
	// Durable is the consumer name (default "clickhouse-ingest").
	Durable string `yaml:"durable"`
	// BatchSize and BatchWait are the size and time thresholds of a batch;
	// they default to the store's Config.BatchSize and BatchWait.
	BatchSize int           `yaml:"batchSize"`
	BatchWait time.Duration `yaml:"batchWait"`
	// AckWait is how long a delivered message may stay unacknowledged
	// before JetStream redelivers it (default 60s). While an insert is
	// retried its messages are kept alive with in-progress acks.
	AckWait time.Duration `yaml:"ackWait"`
	// MaxAckPending bounds the messages delivered and not yet acknowledged,
	// across all replicas (default 10 × BatchSize).
	MaxAckPending int `yaml:"maxAckPending"`
	// InsertTimeout bounds one insert attempt (default 30s); a timed-out
	// attempt is retried.
	InsertTimeout time.Duration `yaml:"insertTimeout"`
	// MinBackoff and MaxBackoff bound the retry delay after a failed insert
	// or fetch (defaults 100ms and 10s).
	MinBackoff time.Duration `yaml:"minBackoff"`
	MaxBackoff time.Duration `yaml:"maxBackoff"`
	// LagInterval is how often the pending and oldest-age gauges are
	// refreshed (default 5s).
	LagInterval time.Duration `yaml:"lagInterval"`
}

func (c *IngestConfig) withDefaults(s Config) {
	if c.Durable == "" {
		c.Durable = DefaultIngestConsumer
	}
	if c.BatchSize <= 0 {
		c.BatchSize = s.BatchSize
	}
	if c.BatchWait <= 0 {
		c.BatchWait = s.BatchWait
	}
	if c.AckWait <= 0 {
		c.AckWait = 60 * time.Second
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = 10 * c.BatchSize
	}
	c.MaxAckPending = max(c.MaxAckPending, c.BatchSize)
	if c.InsertTimeout <= 0 {
		c.InsertTimeout = 30 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.LagInterval <= 0 {
		c.LagInterval = 5 * time.Second
	}
}

// IngestMetrics are the ingest consumer's Prometheus metrics.
type IngestMetrics struct {
	rows      prometheus.Counter
	batches   prometheus.Counter
	duration  prometheus.Histogram
	pending   prometheus.Gauge
	oldestAge prometheus.Gauge
	ackFloor  prometheus.Gauge
	errors    *prometheus.CounterVec
}

func newIngestMetrics(reg prometheus.Registerer) *IngestMetrics {
	m := &IngestMetrics{
		rows: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_clickhouse_ingest_rows_total",
			Help: "Events inserted into ClickHouse by this gateway."}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_clickhouse_ingest_batches_total",
			Help: "Batches inserted into ClickHouse by this gateway."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eventgate_clickhouse_ingest_insert_duration_seconds",
			Help: "Duration of successful batch inserts.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_clickhouse_ingest_pending",
			Help: "Stream messages not yet acknowledged by the ingest consumer (undelivered + in flight)."}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_clickhouse_ingest_oldest_age_seconds",
			Help: "Age of the oldest stream message not yet in ClickHouse; 0 when caught up."}),
		ackFloor: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_clickhouse_ingest_ack_floor",
			Help: "Stream sequence up to which every message is in ClickHouse."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eventgate_clickhouse_ingest_errors_total",
			Help: "Ingest errors by stage: fetch, decode (message terminated), minutes (per-minute header ignored), insert (retried), ack, lag."}, []string{"stage"}),
	}
	for _, s := range []string{"fetch", "decode", "minutes", "insert", "ack", "lag"} {
		m.errors.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.batches, m.duration, m.pending, m.oldestAge, m.ackFloor, m.errors)
	}
	return m
}

// Ingester copies the events stream into ClickHouse through a durable pull
// consumer. A batch is acknowledged only after its INSERT returned, so the
// consumer's ack floor is a sequence up to which ClickHouse holds every
// event: the resourceVersion Query may answer for. If ClickHouse fails, the
// batch is retried with backoff and nothing is acknowledged; emits keep
// going into JetStream, and ingest catches up when ClickHouse is back.
type Ingester struct {
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
	store  *Store
	cfg    IngestConfig
	log    *slog.Logger
	m      *IngestMetrics

	// encoder, when not nil, is the low-priority thread that builds and
	// encodes batches (Config.IngestNice).
	encoder *niceThread

	// alive is when the inserter last showed progress (an insert attempt
	// ended); the fetcher keeps a waiting batch only while it is recent.
	alive atomic.Int64

	stop   chan struct{} // closed by Stop: finish the batch in hand and return
	cancel context.CancelFunc
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// StartIngest creates (or updates) the durable consumer on stream and starts
// copying it into store. Metrics are registered with reg when it is not nil.
func StartIngest(ctx context.Context, js jetstream.JetStream, stream string, store *Store, cfg IngestConfig, log *slog.Logger, reg prometheus.Registerer) (*Ingester, error) {
	cfg.withDefaults(store.cfg)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
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
	var encoder *niceThread
	// Only for the embedded engine: with a server, encoding is the small
	// part of an insert and the server's work is not in this process.
	if n := store.cfg.IngestNice; n > 0 && store.t.kind() == "chdb" {
		if encoder, err = startNiceThread(n); err != nil {
			return nil, fmt.Errorf("clickhouse ingest: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in := &Ingester{
		js: js, stream: stream, cons: cons, store: store, cfg: cfg, log: log.With("consumer", cfg.Durable),
		m: newIngestMetrics(reg), stop: make(chan struct{}), cancel: cancel, done: make(chan struct{}),
		encoder: encoder,
	}
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
	nice := 0
	if encoder != nil {
		nice = encoder.nice
	}
	in.log.Info("clickhouse ingest started", "stream", stream, "batch_size", cfg.BatchSize, "batch_wait", cfg.BatchWait,
		"encoder_nice", nice)
	return in, nil
}

// Stop ends ingest gracefully: the batch in hand is inserted and
// acknowledged, then the consumer stops. If ctx ends first (e.g. ClickHouse
// is down), the batch is abandoned unacknowledged — it is redelivered later,
// to this or another replica — and Stop returns ctx.Err().
func (in *Ingester) Stop(ctx context.Context) error {
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
func (in *Ingester) Done() <-chan struct{} { return in.done }

func (in *Ingester) stopping() bool {
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
	rows    []Row
	fetched time.Duration // fetch and decode time
}

// run is a two-stage pipeline: fetchLoop fetches and decodes batch N+1
// while this goroutine inserts and acknowledges batch N.
func (in *Ingester) run(ctx context.Context) {
	if in.encoder != nil {
		defer in.encoder.stop()
	}
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
func (in *Ingester) fetchLoop(ctx context.Context, out chan<- *batch) {
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

func (in *Ingester) handOver(ctx context.Context, out chan<- *batch, b *batch) bool {
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
func (in *Ingester) decode(msgs []jetstream.Msg) *batch {
	b := &batch{rows: make([]Row, 0, len(msgs)), msgs: make([]jetstream.Msg, 0, len(msgs))}
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			in.reject(m, 0, fmt.Errorf("metadata: %w", err))
			continue
		}
		ev, err := event.Unmarshal(m.Data())
		if err != nil {
			in.reject(m, md.Sequence.Stream, err)
			continue
		}
		row := Row{Seq: md.Sequence.Stream, Subject: m.Subject(), Event: ev, StoredAt: md.Timestamp, Raw: m.Data()}
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
func (in *Ingester) fetch() ([]jetstream.Msg, error) {
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
func (in *Ingester) reject(m jetstream.Msg, seq uint64, err error) {
	in.m.errors.WithLabelValues("decode").Inc()
	in.log.Error("clickhouse ingest: undecodable message dropped", "seq", seq, "subject", m.Subject(), "err", err)
	if err := m.TermWithReason("eventgate: undecodable event"); err != nil {
		in.m.errors.WithLabelValues("ack").Inc()
	}
}

func (in *Ingester) insert(ctx context.Context, rows []Row, msgs []jetstream.Msg) bool {
	backoff := in.cfg.MinBackoff
	lastProgress := time.Now()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, in.cfg.InsertTimeout)
		err := in.store.insert(actx, rows, in.encoder)
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

// ack acknowledges a committed batch: one ack per message (AckAll would
// also acknowledge messages delivered to other replicas and not yet
// inserted), the last one confirmed by the server, which processes a
// connection's acks in order.
func (in *Ingester) ack(ctx context.Context, msgs []jetstream.Msg) {
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
func (in *Ingester) sleep(ctx context.Context, d time.Duration, holding bool) bool {
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

func (in *Ingester) lagLoop(ctx context.Context) {
	t := time.NewTicker(in.cfg.LagInterval)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, in.cfg.LagInterval)
		in.refreshLag(lctx)
		cancel()
		select {
		case <-t.C:
		case <-in.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (in *Ingester) refreshLag(ctx context.Context) {
	info, err := in.cons.Info(ctx)
	if err != nil {
		if ctx.Err() == nil {
			in.m.errors.WithLabelValues("lag").Inc()
		}
		return
	}
	in.m.ackFloor.Set(float64(info.AckFloor.Stream))
	pending, age, err := in.lagFrom(ctx, info)
	if err != nil {
		in.m.errors.WithLabelValues("lag").Inc()
		return
	}
	in.m.pending.Set(float64(pending))
	in.m.oldestAge.Set(age.Seconds())
}

// AckFloor returns the consumer's ack floor: the stream sequence up to
// which every message is in ClickHouse (or was undecodable and dropped).
// It is the resourceVersion to pass to Store.Query.
func (in *Ingester) AckFloor(ctx context.Context) (uint64, error) {
	info, err := in.cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("clickhouse ingest: consumer info: %w", err)
	}
	return info.AckFloor.Stream, nil
}

// Lag returns the messages not yet acknowledged (undelivered plus in flight,
// across all replicas) and the age of the oldest of them (0 when caught up),
// for readiness.
func (in *Ingester) Lag(ctx context.Context) (pending uint64, oldestAge time.Duration, err error) {
	info, err := in.cons.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("clickhouse ingest: consumer info: %w", err)
	}
	return in.lagFrom(ctx, info)
}

func (in *Ingester) lagFrom(ctx context.Context, info *jetstream.ConsumerInfo) (uint64, time.Duration, error) {
	pending := info.NumPending + uint64(max(info.NumAckPending, 0))
	if pending == 0 {
		return 0, 0, nil
	}
	s, err := in.js.Stream(ctx, in.stream)
	if err != nil {
		return pending, 0, fmt.Errorf("clickhouse ingest: stream: %w", err)
	}
	// The oldest message not yet acknowledged is the first one after the
	// ack floor (messages may have been removed from the stream since).
	m, err := s.GetMsg(ctx, info.AckFloor.Stream+1, jetstream.WithGetMsgSubject(">"))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return pending, 0, nil
		}
		return pending, 0, fmt.Errorf("clickhouse ingest: oldest pending message: %w", err)
	}
	return pending, max(time.Since(m.Time), 0), nil
}
