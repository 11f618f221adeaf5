package intake

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// TestAReplayAfterTheDuplicateWindowStoresEachWriteOnce crashes the only
// replica and starts the next one only after the events stream has
// forgotten the ids of the crashed one's writes (its duplicate window, one
// second here, has passed: a gateway restarted a few minutes after a kill
// -9). The new owners replay every entry since their checkpoints and issue
// the same writes again; each must still be stored once, and the series go
// on counting.
func TestAReplayAfterTheDuplicateWindowStoresEachWriteOnce(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	cfg.CheckpointInterval = time.Hour // everything since the first takeover is replayed
	cfg.MaxAge = 24 * time.Hour
	opts := replicaOptions{eventsWindow: time.Second}
	a := startReplicaWith(t, ns, "", "a", cfg, opts)
	waitFor(t, 30*time.Second, "a to own every partition", func() bool { return a.in.Stats().OwnedPartitions == cfg.Partitions })
	ctx := context.Background()
	const keys = 40
	// Keys 0..keys-1 become series, keys+0..2*keys-1 stay singletons.
	for k := 0; k < 2*keys; k++ {
		if r := submitOne(t, a.in, ctx, occurrence(k, "first"), ""); r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
			t.Fatalf("key %d, first: %+v", k, r)
		}
	}
	seriesUID := make(map[int]string)
	for k := 0; k < keys; k++ {
		r := submitOne(t, a.in, ctx, occurrence(k, "second"), "")
		if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED {
			t.Fatalf("key %d, second: %+v", k, r)
		}
		seriesUID[k] = r.SeriesUID
	}
	a.kill()

	// Wait until the stream forgets ids stored before now: a probe stored
	// now, sent again, is stored anew once its id is forgotten.
	nc, js := connect(t, ns, "", "probe")
	defer nc.Close()
	probe := occurrence(1000, "probe")
	data, err := event.Marshal(probe)
	if err != nil {
		t.Fatal(err)
	}
	subj := "events.project.p1.Pod.default._"
	if _, err := js.Publish(ctx, subj, data, jetstream.WithMsgID("probe")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the events stream to forget the crashed replica's write ids", func() bool {
		ack, err := js.Publish(ctx, subj, data, jetstream.WithMsgID("probe"))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate {
			time.Sleep(100 * time.Millisecond) // poll interval
		}
		return !ack.Duplicate
	})

	b := startReplicaWith(t, ns, "", "b", cfg, opts)
	// One more occurrence of every key: its decision comes after its
	// partition replayed what the crashed replica had logged.
	for k := 0; k < 2*keys; k++ {
		r := submitOne(t, b.in, ctx, occurrence(k, "after the restart"), "")
		switch {
		case k < keys && (r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED || r.SeriesUID != seriesUID[k]):
			t.Errorf("key %d after the restart: %+v, want SERIES_COUNTED into %s", k, r, seriesUID[k])
		case k >= keys && r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED:
			t.Errorf("key %d after the restart: %+v, want SERIES_STARTED", k, r)
		}
	}
	ids := make(map[string]int)
	writes := 0
	for _, versions := range readEvents(t, b.js) {
		for _, v := range versions {
			if id := v.hdr.Get(jetstream.MsgIDHeader); id != "probe" {
				ids[id]++
				writes++
			}
		}
	}
	// 2·keys creations, keys series starts, keys more starts after the
	// restart, and the restart's counts, flushed or not yet.
	if writes < 4*keys {
		t.Fatalf("%d writes stored, want at least %d", writes, 4*keys)
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("write %s stored %d times", id, n)
		}
	}
	// What a was acknowledged for: 2·keys creations and keys starts.
	if st := b.in.Stats(); st.Takeovers < uint64(cfg.Partitions) || st.ReplayedStored < 3*keys {
		t.Errorf("restarted replica: %d takeovers, %d replayed writes found stored; want %d and at least %d", st.Takeovers, st.ReplayedStored, cfg.Partitions, 3*keys)
	}
}
