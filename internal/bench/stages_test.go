package bench

import (
	"math"
	"testing"
)

func TestStageQuantileIsOfTheObservationsBetweenTwoReadings(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004, math.Inf(1)}
	before := histogram{bounds: bounds, counts: []uint64{50, 50, 50, 50}}
	// 100 more: 10 up to 1 ms, 80 in (1, 2] ms, 10 in (2, 4] ms.
	after := histogram{bounds: bounds, counts: []uint64{60, 140, 150, 150}}
	for _, c := range []struct{ q, want float64 }{
		{0.5, 1.5},  // rank 50: 40 of the 80 in (1, 2]
		{0.99, 3.8}, // rank 99: 9 of the 10 in (2, 4]
		{0.05, 0.5}, // rank 5: half of the first bucket
		{1.0, 4.0},  // the last finite bound
	} {
		if got := after.quantileSince(before, c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q %v = %v ms, want %v", c.q, got, c.want)
		}
	}
	if got := after.quantileSince(after, 0.99); got != -1 {
		t.Errorf("with no observations between the readings: %v, want -1", got)
	}
	past := histogram{bounds: bounds, counts: []uint64{0, 0, 0, 10}}
	if got := past.quantileSince(histogram{}, 0.5); got != 4 {
		t.Errorf("past the last finite bound: %v ms, want 4 (the bound)", got)
	}
}
