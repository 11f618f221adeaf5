package telemetry

import (
	"math"
	"runtime/metrics"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRuntimeBucketsCountTowardTheFirstBoundAtOrAboveTheirEdge(t *testing.T) {
	h := &metrics.Float64Histogram{
		Buckets: []float64{math.Inf(-1), 0, 1e-3, 2e-3, 3e-3, math.Inf(1)},
		Counts:  []uint64{0, 5, 3, 2, 1},
	}
	count, sum, cum := rebucket(h, []float64{1e-3, 2.5e-3, 4e-3})
	if count != 11 {
		t.Errorf("count %d, want 11", count)
	}
	// [0,1ms) → 1 ms; [1,2) → 2.5; [2,3) → 4 (its edge, 3 ms, is above 2.5); [3,∞) → none.
	want := map[float64]uint64{1e-3: 5, 2.5e-3: 8, 4e-3: 10}
	for b, n := range want {
		if cum[b] != n {
			t.Errorf("bucket ≤ %v: %d, want %d", b, cum[b], n)
		}
	}
	if wantSum := 5*0.5e-3 + 3*1.5e-3 + 2*2.5e-3 + 1*3e-3; math.Abs(sum-wantSum) > 1e-12 {
		t.Errorf("sum %v, want %v", sum, wantSum)
	}
}

func TestRuntimeLatenciesAreExported(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(RuntimeLatencies())
	n, err := testutil.GatherAndCount(reg, "eventgate_go_sched_latency_seconds", "eventgate_go_gc_pause_seconds")
	if err != nil || n != 2 {
		t.Fatalf("gathered %d metrics (%v), want the two histograms", n, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if got := len(mf.GetMetric()[0].GetHistogram().GetBucket()); got != len(latencyBounds) {
			t.Errorf("%s: %d buckets, want %d", mf.GetName(), got, len(latencyBounds))
		}
	}
}
