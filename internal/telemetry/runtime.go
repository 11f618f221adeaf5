package telemetry

import (
	"math"
	"runtime/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// RuntimeLatencies exports two of the Go runtime's histograms with buckets
// fine enough to read a millisecond tail from: how long goroutines waited
// to run (eventgate_go_sched_latency_seconds) and how long the collector
// stopped the world (eventgate_go_gc_pause_seconds). A latency tail that
// every stage of a request shares, and the process wanting more CPU than
// it gets, show in the first; the standard Go collector exports it with
// buckets ten times apart (1 ms, 10 ms, 100 ms).
func RuntimeLatencies() prometheus.Collector {
	return &runtimeLatencies{
		samples: []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/pauses/total/gc:seconds"}},
		descs: []*prometheus.Desc{
			prometheus.NewDesc("eventgate_go_sched_latency_seconds", "Time goroutines spent runnable before running (the Go runtime's /sched/latencies:seconds).", nil, nil),
			prometheus.NewDesc("eventgate_go_gc_pause_seconds", "Stop-the-world pauses of the Go collector (the Go runtime's /sched/pauses/total/gc:seconds).", nil, nil),
		},
	}
}

// latencyBounds: 16 µs to 2 s, doubling.
var latencyBounds = prometheus.ExponentialBuckets(16e-6, 2, 18)

type runtimeLatencies struct {
	samples []metrics.Sample
	descs   []*prometheus.Desc
}

func (c *runtimeLatencies) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *runtimeLatencies) Collect(ch chan<- prometheus.Metric) {
	samples := make([]metrics.Sample, len(c.samples))
	copy(samples, c.samples)
	metrics.Read(samples)
	for i, s := range samples {
		if s.Value.Kind() != metrics.KindFloat64Histogram {
			continue // not in this Go version
		}
		count, sum, buckets := rebucket(s.Value.Float64Histogram(), latencyBounds)
		ch <- prometheus.MustNewConstHistogram(c.descs[i], count, sum, buckets)
	}
}

// rebucket maps the runtime's histogram onto bounds: each runtime bucket
// counts toward the first bound at or above its upper edge (so a
// quantile read from the result is never below the true one), and the sum
// is estimated from the buckets' midpoints (the runtime keeps none).
func rebucket(h *metrics.Float64Histogram, bounds []float64) (uint64, float64, map[float64]uint64) {
	cum := make(map[float64]uint64, len(bounds))
	var count uint64
	var sum float64
	j := 0
	for i, n := range h.Counts {
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		if n > 0 {
			mid := hi
			if math.IsInf(lo, -1) {
				mid = max(hi, 0)
			} else if !math.IsInf(hi, 1) {
				mid = (lo + hi) / 2
			} else {
				mid = lo
			}
			sum += mid * float64(n)
		}
		for j < len(bounds) && bounds[j] < hi {
			cum[bounds[j]] = count
			j++
		}
		count += n
	}
	for ; j < len(bounds); j++ {
		cum[bounds[j]] = count
	}
	return count, sum, cum
}
