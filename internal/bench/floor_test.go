package bench

import (
	"context"
	"testing"
	"time"
)

// The floor passes every event through each part once: it fails unless the
// engine received exactly as many rows as were published. It reports the
// memory the parts held.
func TestPipelineFloorPassesEveryEventThroughEachPart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, err := PipelineFloor(ctx, t.TempDir(), "", 3000)
	if err != nil {
		t.Fatal(err)
	}
	if run.Rate <= 0 || run.HeapInuseMiB <= 0 || run.PeakRSSMiB < run.HeapInuseMiB {
		t.Errorf("floor run %+v: want a rate, a heap in use and a peak RSS above it", run)
	}
}

// A paced run times every batch's acknowledgement and every event's
// arrival at the watch feed and in the engine.
func TestPipelineFloorPacedTimesEveryBatchAndEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const rate, d = 2000, 2 * time.Second
	lat, err := PipelineFloorPaced(ctx, t.TempDir(), "", rate, d)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(lat.Watch), int(rate*d.Seconds()); got != want {
		t.Errorf("%d events timed at the watch feed, want %d", got, want)
	}
	// Every batch published is acknowledged: at most one a Tick (fewer
	// when a loaded machine misses ticks).
	if n := len(lat.Ack); n != lat.Batches || n == 0 || n > int(d/Tick)+1 {
		t.Errorf("%d batches acknowledged of %d published, want all of them, at most %d", n, lat.Batches, int(d/Tick)+1)
	}
	// And every batch is timed until the engine holds it.
	if n := len(lat.Queryable); n != lat.Batches {
		t.Errorf("%d batches timed until inserted of %d published, want all of them", n, lat.Batches)
	}
	for _, xs := range [][]float64{lat.Ack, lat.Watch, lat.Queryable} {
		for _, x := range xs {
			if x <= 0 {
				t.Fatalf("latency %v ms, want > 0", x)
			}
		}
	}
}
