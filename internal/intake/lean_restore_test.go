package intake

import (
	"context"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/series"
)

// TestKilledOwnerSingletonsContinueFromLeanCheckpoint: a checkpoint keeps a
// singleton as its key's hash and log position only. After the owner is
// killed, the replica that restores that checkpoint starts each waiting
// singleton's series under the first occurrence's uid, reading the first
// occurrence back from the intake log, and every series, those already
// ongoing included, ends with its exact count.
func TestKilledOwnerSingletonsContinueFromLeanCheckpoint(t *testing.T) {
	const singles, ongoing = 40, 8
	ns := startServer(t)
	cfg := testConfig()
	cfg.Series = series.Config{Window: time.Minute, FinishAfter: time.Minute, FlushInterval: 300 * time.Millisecond, Heartbeat: 30 * time.Second}
	a := startReplica(t, ns, "", "a", cfg)
	ctx := context.Background()

	firsts := map[int]*eventgatev1.Event{}
	for k := range singles {
		firsts[k] = occurrence(k, "first")
		if r := submitOne(t, a.in, ctx, firsts[k], ""); r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
			t.Fatalf("first of key %d: %+v", k, r)
		}
	}
	for k := 1000; k < 1000+ongoing; k++ {
		firsts[k] = occurrence(k, "first")
		for i := range 3 {
			ev := firsts[k]
			if i > 0 {
				ev = occurrence(k, "again")
			}
			submitOne(t, a.in, ctx, ev, "")
		}
	}

	// Every partition's checkpoint covers its last entry: what b restores
	// holds the singletons, not only the log after it.
	waitCheckpointsCoverLog(t, a, cfg)
	a.kill()

	b := startReplica(t, ns, "", "b", cfg)
	for k := range singles {
		r := submitOne(t, b.in, ctx, occurrence(k, "second"), "")
		if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED || r.SeriesUID != firsts[k].Uid {
			t.Fatalf("second of key %d after the kill: %+v, want SERIES_STARTED of %s", k, r, firsts[k].Uid)
		}
	}
	for k := 1000; k < 1000+ongoing; k++ {
		r := submitOne(t, b.in, ctx, occurrence(k, "fourth"), "")
		if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED || r.SeriesUID != firsts[k].Uid {
			t.Fatalf("fourth of key %d after the kill: %+v, want SERIES_COUNTED into %s", k, r, firsts[k].Uid)
		}
	}
	// (The counters are summed after each pull, just after the decisions.)
	waitFor(t, 10*time.Second, "first occurrences read from the log by the restoring replica", func() bool {
		st := b.in.Stats()
		return st.Takeovers > 0 && st.FirstReads > 0
	})
	for k, first := range firsts {
		want := int32(2)
		if k >= 1000 {
			want = 4
		}
		waitFlushedCount(t, b.js, first.Uid, want) // per-minute counts included
	}
	stored := readEvents(t, b.js)
	for _, want := range firsts {
		versions := stored[want.Uid]
		latest := versions[len(versions)-1].ev
		// The series keeps its first occurrence's fields.
		if latest.Name != want.Name || !latest.EventTime.AsTime().Equal(want.EventTime.AsTime()) {
			t.Errorf("%s: stored as %s at %v, want the first occurrence's name %s and time %v", want.Uid, latest.Name, latest.EventTime.AsTime(), want.Name, want.EventTime.AsTime())
		}
	}
}
