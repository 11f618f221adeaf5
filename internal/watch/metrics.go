package watch

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the watch feed's metrics.
type Metrics struct {
	watchers      prometheus.Gauge
	dispatched    prometheus.Counter
	delivered     prometheus.Counter
	slow          prometheus.Counter
	replays       prometheus.Counter
	replayLagging prometheus.Counter
	decodeErrors  prometheus.Counter
	feedLag       prometheus.Histogram
	sendLag       prometheus.Histogram
}

// NewMetrics registers the watch feed's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		watchers:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_watchers", Help: "Active watchers on this gateway."}),
		dispatched:    prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_feed_messages_total", Help: "Messages read by this gateway's live feed."}),
		delivered:     prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_queued_total", Help: "Events queued to watchers by the live feed."}),
		slow:          prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_slow_total", Help: "Watches ended because their buffer overflowed."}),
		replays:       prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_replays_total", Help: "Catch-up replays from JetStream for resumed watches."}),
		replayLagging: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_replay_lagging_total", Help: "Replays that waited for the stream replica their consumer reads, which lagged the stream."}),
		decodeErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_decode_errors_total", Help: "Stream messages the feed could not decode."}),
		feedLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "eventgate_watch_feed_lag_seconds",
			Help:    "Time from an event being stored in the stream to this gateway's live feed handing it to its watchers (clocks of the stream's server and the gateway).",
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 16), // 0.25 ms … 8 s
		}),
		sendLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "eventgate_watch_send_lag_seconds",
			Help:    "Time from a live event being stored in the stream to a watch of this gateway sending it: the feed's lag and the watch's queue. Watches that take their events in batches (the rules') are not counted.",
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 16), // 0.25 ms … 8 s
		}),
	}
	if reg != nil {
		reg.MustRegister(m.watchers, m.dispatched, m.delivered, m.slow, m.replays, m.replayLagging, m.decodeErrors, m.feedLag, m.sendLag)
	}
	return m
}
