package bench

import (
	"context"
	"testing"
	"time"
)

// The floor passes every event through each part once: it fails unless the
// engine received exactly as many rows as were published.
func TestPipelineFloorPassesEveryEventThroughEachPart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rate, err := PipelineFloor(ctx, t.TempDir(), "", 3000)
	if err != nil {
		t.Fatal(err)
	}
	if rate <= 0 {
		t.Errorf("rate %v, want > 0", rate)
	}
}
