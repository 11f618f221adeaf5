package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ingest consumer's Prometheus metrics.
type Metrics struct {
	rows      prometheus.Counter
	batches   prometheus.Counter
	duration  prometheus.Histogram
	pending   prometheus.Gauge
	oldestAge prometheus.Gauge
	ackFloor  prometheus.Gauge
	errors    *prometheus.CounterVec
	info      *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rows: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_clickhouse_ingest_rows_total",
			Help: "Events inserted into ClickHouse by this gateway."}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_clickhouse_ingest_batches_total",
			Help: "Batches inserted into ClickHouse by this gateway."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eventgate_clickhouse_ingest_insert_duration_seconds",
			Help: "Duration of successful batch inserts.",
			// Steps of about 1.5x from 1 ms to 32 s: an insert's p99 sits
			// between 0.2 and 2 s, where doubling steps told 0.5 from 1 s
			// and little else.
			Buckets: prometheus.ExponentialBucketsRange(0.001, 32, 27)}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_clickhouse_ingest_pending",
			Help: "Stream messages not yet acknowledged by the ingest consumer (undelivered + in flight)."}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_clickhouse_ingest_oldest_age_seconds",
			Help: "Age of the oldest stream message not yet in ClickHouse; 0 when caught up."}),
		ackFloor: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_clickhouse_ingest_ack_floor",
			Help: "Stream sequence up to which every message is in ClickHouse."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eventgate_clickhouse_ingest_errors_total",
			Help: "Ingest errors by stage: fetch, decode (message terminated), minutes (per-minute header ignored), insert (retried), ack, lag."}, []string{"stage"}),
	}
	m.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "eventgate_clickhouse_ingest_consumer_info",
		Help: "The ingest consumer of this gateway (1): its name, and the store it copies into when the store is its own (empty when shared)."}, []string{"consumer", "store"})
	for _, s := range []string{"fetch", "decode", "minutes", "insert", "ack", "lag"} {
		m.errors.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.batches, m.duration, m.pending, m.oldestAge, m.ackFloor, m.errors, m.info)
	}
	return m
}

func (in *Consumer) lagLoop(ctx context.Context) {
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

// info returns the consumer's info.
func (in *Consumer) info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	info, err := in.cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("clickhouse ingest: consumer info: %w", err)
	}
	return info, nil
}

func (in *Consumer) refreshLag(ctx context.Context) {
	info, err := in.info(ctx)
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
func (in *Consumer) AckFloor(ctx context.Context) (uint64, error) {
	info, err := in.info(ctx)
	if err != nil {
		return 0, err
	}
	return info.AckFloor.Stream, nil
}

// Lag returns the messages not yet acknowledged (undelivered plus in flight,
// across the replicas sharing the consumer) and the age of the oldest of
// them (0 when caught up), for readiness. It refreshes the lag gauges too,
// so that they stay current while ingest is stopped or stuck.
func (in *Consumer) Lag(ctx context.Context) (pending uint64, oldestAge time.Duration, err error) {
	info, err := in.info(ctx)
	if err != nil {
		return 0, 0, err
	}
	in.m.ackFloor.Set(float64(info.AckFloor.Stream))
	pending, oldestAge, err = in.lagFrom(ctx, info)
	if err != nil {
		return pending, oldestAge, err
	}
	in.m.pending.Set(float64(pending))
	in.m.oldestAge.Set(oldestAge.Seconds())
	return pending, oldestAge, nil
}

func (in *Consumer) lagFrom(ctx context.Context, info *jetstream.ConsumerInfo) (uint64, time.Duration, error) {
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
