package intake

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/series"
)

// metrics are the intake's Prometheus metrics. Counters of the aggregation
// count what this replica's owners did: entries replayed after a takeover
// are counted again by the new owner.
type metrics struct {
	active      prometheus.Gauge
	tracked     prometheus.Gauge
	owned       prometheus.Gauge
	occurrences prometheus.Counter
	folded      prometheus.Counter
	saved       prometheus.Counter
	writes      *prometheus.CounterVec
	evicted     prometheus.Counter
	bytes       prometheus.Gauge
	reads       prometheus.Counter
	collisions  prometheus.Counter
	takeovers   prometheus.Counter
	salvaged    prometheus.Counter
	replayed    prometheus.Counter
	resyncs     *prometheus.CounterVec
	ticks       prometheus.Counter
	checkpoint  prometheus.Histogram
	submitted   *prometheus.CounterVec
	stage       *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		active:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_series_active", Help: "Ongoing event series in the partitions this replica owns."}),
		tracked:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_series_tracked_keys", Help: "Tracked series keys (singletons that may start a series, and ongoing series) in the partitions this replica owns."}),
		owned:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_series_owned_partitions", Help: "Intake partitions this replica owns."}),
		occurrences: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_occurrences_total", Help: "Occurrences aggregated by this replica."}),
		folded:      prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_folded_total", Help: "Occurrences counted into an ongoing series without a write of their own."}),
		saved:       prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_writes_saved_total", Help: "Writes to the events stream saved by series aggregation."}),
		writes:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eventgate_series_writes_total", Help: "Writes to the events stream by the aggregation, by reason."}, []string{"reason"}),
		evicted:     prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_evicted_singletons_total", Help: "Singletons forgotten early at the series memory budget (stored; a recurrence starts a new singleton)."}),
		bytes:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_series_tracked_bytes", Help: "Memory the tracked series keys account for in the partitions this replica owns (the budget is --series-max-bytes per partition)."}),
		reads:       prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_first_occurrence_reads_total", Help: "First occurrences read back from the intake log to start a series (no longer in the ring of recent ones)."}),
		collisions:  prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_key_hash_collisions_total", Help: "Tracked singletons forgotten because another key had the same 128-bit hash."}),
		takeovers:   prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_takeovers_total", Help: "Partitions this replica took over (restored from their checkpoint)."}),
		salvaged:    prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_checkpoints_salvaged_total", Help: "Damaged partition checkpoints (a chunk missing or corrupt) this replica took over with what they still held; the keys they no longer tracked started again as new events."}),
		replayed:    prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_replayed_stored_total", Help: "Writes replayed after a takeover that the events stream already held, so were not published again."}),
		resyncs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eventgate_series_resyncs_total", Help: "Times an owner rewound its partition's consumer or restored its checkpoint, by cause."}, []string{"cause"}),
		ticks:       prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_series_ticks_total", Help: "Tick entries this replica put in the intake log."}),
		checkpoint:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eventgate_series_checkpoint_duration_seconds", Help: "Time to checkpoint a partition: wait for its writes, store its snapshot.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "eventgate_intake_stage_seconds",
			Help:    "Where a Submit's time goes: log (its intake entries acknowledged), consumer (entry logged to folded by its owner), write (folded to its events write acknowledged), decide (entries acknowledged to every decision received).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"stage"}),
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eventgate_intake_submitted_total", Help: "Occurrences submitted through this replica, by result."}, []string{"outcome"}),
	}
	for r := series.Reason(0); r < series.NumReasons; r++ {
		m.writes.WithLabelValues(r.String())
	}
	m.writes.WithLabelValues(wire.ReasonClient)
	if reg != nil {
		reg.MustRegister(m.active, m.tracked, m.owned, m.occurrences, m.folded, m.saved, m.writes, m.evicted,
			m.bytes, m.reads, m.collisions, m.takeovers, m.salvaged, m.replayed, m.resyncs, m.ticks, m.checkpoint, m.submitted, m.stage)
	}
	return m
}
