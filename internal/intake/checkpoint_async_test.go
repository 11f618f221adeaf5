package intake

import (
	"context"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/series"
)

// TestCheckpointBesideFolding: while a partition's checkpoint is being
// written (held before its store here), the partition goes on folding and
// deciding occurrences; once released, the checkpoint is stored, and a
// replica restarted from it continues the series exactly.
func TestCheckpointBesideFolding(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	cfg.CheckpointInterval = 50 * time.Millisecond
	cfg.Series = series.Config{Window: time.Minute, FinishAfter: time.Minute, FlushInterval: 300 * time.Millisecond, Heartbeat: 30 * time.Second}
	a := startReplica(t, ns, "", "a", cfg)
	first := occurrence(1, "first")
	part := a.in.Partition(first)

	held := make(chan struct{})
	release := make(chan struct{})
	hook := func(p int) {
		if p != part {
			return
		}
		select {
		case held <- struct{}{}:
			<-release
		default:
		}
	}
	a.in.beforeSave.Store(&hook)
	defer close(release)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if rs, err := a.in.Submit(ctx, []*eventgatev1.Event{first}, nil); err != nil || rs[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
		t.Fatalf("first occurrence: %+v, %v", rs, err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("no checkpoint of the partition started")
	}
	before := a.in.Stats().Checkpoints

	// The checkpoint is held: occurrences of the partition are still
	// decided, each in turn.
	want := []eventgatev1.EmitOutcome{eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED}
	for range 9 {
		want = append(want, eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED)
	}
	for i, w := range want {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		rs, err := a.in.Submit(dctx, []*eventgatev1.Event{occurrence(1, "repeat")}, nil)
		dcancel()
		if err != nil {
			t.Fatalf("occurrence %d while the checkpoint is held: %v", i+2, err)
		}
		if rs[0].Outcome != w {
			t.Fatalf("occurrence %d while the checkpoint is held: %v, want %v", i+2, rs[0].Outcome, w)
		}
	}
	if got := a.in.Stats().Checkpoints; got != before {
		t.Fatalf("%d checkpoints stored while one was held", got-before)
	}

	// Released: it is stored, then later ones follow.
	release <- struct{}{}
	waitFor(t, 10*time.Second, "the held checkpoint and a later one stored", func() bool {
		return a.in.Stats().Checkpoints >= before+2
	})
	a.stop(t)

	b := startReplica(t, ns, "", "b", cfg)
	rs, err := b.in.Submit(ctx, []*eventgatev1.Event{occurrence(1, "after restart")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED || rs[0].SeriesUID != first.Uid {
		t.Fatalf("after restart: %+v, want SERIES_COUNTED in series %s", rs[0], first.Uid)
	}
	waitFlushedCount(t, b.js, first.Uid, 12)
}
