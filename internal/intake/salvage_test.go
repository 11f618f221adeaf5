package intake

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/series"
)

// TestADamagedCheckpointIsTakenOverWithWhatItStillHolds: every chunk of
// the partitions' checkpoints is gone (a bug, an operator's purge) when
// their owner is killed. The replica that takes them over does not retry
// for ever, leaving every event accepted into them unwritten: it restores
// what the checkpoints still hold, here nothing but their positions, and
// goes on. Each key's next occurrence is decided, as a new event, and
// every event accepted before and after is in the events stream.
func TestADamagedCheckpointIsTakenOverWithWhatItStillHolds(t *testing.T) {
	const singles, ongoing = 24, 8
	ns := startServer(t)
	cfg := testConfig()
	cfg.Series = series.Config{Window: time.Minute, FinishAfter: time.Minute, FlushInterval: 300 * time.Millisecond, Heartbeat: 30 * time.Second}
	// Chunks of 64 bytes: every head snapshot with a series and every
	// segment is stored in chunks.
	a := startReplicaChunked(t, ns, "", "a", cfg, 64)
	ctx := context.Background()

	created := map[string]bool{} // uids the intake said it stored as events
	for k := range singles + ongoing {
		n := 1
		if k >= singles {
			n = 3
		}
		for i := range n {
			r := submitOne(t, a.in, ctx, occurrence(k, "before"), "")
			if i == 0 && r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
				t.Fatalf("first of key %d: %+v", k, r)
			}
			if r.Outcome == eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
				created[r.UID] = true
			}
		}
	}
	waitCheckpointsCoverLog(t, a, cfg)
	a.kill()

	// The damage: every checkpoint chunk purged from the bucket.
	_, js := connect(t, ns, "", "damage")
	kv, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	chunks := "$KV." + cfg.Bucket + ".chunk.>"
	info, err := kv.Info(ctx, jetstream.WithSubjectFilter(chunks))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) == 0 {
		t.Fatal("no checkpoint chunks to lose: the test damages nothing")
	}
	if err := kv.Purge(ctx, jetstream.WithPurgeSubject(chunks)); err != nil {
		t.Fatal(err)
	}

	b := startReplicaChunked(t, ns, "", "b", cfg, 64)
	for k := range singles + ongoing {
		r := submitOne(t, b.in, ctx, occurrence(k, "after"), "")
		// Forgotten, its singleton or series starts again.
		if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
			t.Fatalf("key %d after the damage: %+v, want a new event (CREATED)", k, r)
		}
		created[r.UID] = true
	}
	if st := b.in.Stats(); st.Salvaged == 0 || st.Salvaged > st.Takeovers {
		t.Fatalf("stats %+v: want the damaged checkpoints counted as salvaged takeovers", st)
	}
	waitFor(t, 10*time.Second, "every event the intake created in the events stream", func() bool {
		stored, err := tryReadEvents(js)
		if err != nil {
			return false
		}
		for uid := range created {
			if len(stored[uid]) == 0 {
				return false
			}
		}
		return true
	})
}
