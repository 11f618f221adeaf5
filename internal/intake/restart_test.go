package intake

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/series"
)

// TestRestart stops the only replica and starts it again on the same
// server: the new one restores the partitions from their checkpoints, and
// an ongoing series goes on counting under its uid. The checkpoint chunk
// size is forced small, so that the snapshots are stored in chunks.
func TestRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chunk int
	}{{"inline", 0}, {"chunked", 200}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := startServer(t)
			cfg := testConfig()
			cfg.Series = series.Config{Window: time.Minute, FinishAfter: time.Minute, FlushInterval: 300 * time.Millisecond, Heartbeat: 30 * time.Second}
			a := startReplicaChunked(t, ns, "", "a", cfg, tc.chunk)
			ctx := context.Background()
			first := occurrence(3, "1")
			if r := submitOne(t, a.in, ctx, first, ""); r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
				t.Fatalf("first: %+v", r)
			}
			// Other keys, so that the snapshots have something to chunk.
			for k := 10; k < 20; k++ {
				submitOne(t, a.in, ctx, occurrence(k, "other"), "")
			}
			if r := submitOne(t, a.in, ctx, occurrence(3, "2"), ""); r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED || r.SeriesUID != first.Uid {
				t.Fatalf("second: %+v", r)
			}
			if r := submitOne(t, a.in, ctx, occurrence(3, "3"), ""); r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED {
				t.Fatalf("third: %+v", r)
			}
			a.stop(t)

			b := startReplicaChunked(t, ns, "", "b", cfg, tc.chunk)
			for i := 4; i <= 6; i++ {
				r := submitOne(t, b.in, ctx, occurrence(3, "after restart"), "")
				if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED || r.SeriesUID != first.Uid {
					t.Fatalf("occurrence %d after the restart: %+v, want SERIES_COUNTED into %s", i, r, first.Uid)
				}
			}
			waitFlushedCount(t, b.js, first.Uid, 6)
			st := b.in.Stats()
			if st.Takeovers == 0 || st.TrackedKeys != 11 || st.ActiveSeries != 1 {
				t.Errorf("restarted replica: %+v, want takeovers, 11 keys and 1 series", st)
			}
			if tc.chunk > 0 {
				h := headOf(t, b, b.in.Partition(first))
				if h.gen == "" || h.chunks < 2 {
					t.Errorf("head of a chunked checkpoint: gen %q chunks %d", h.gen, h.chunks)
				}
			}
		})
	}
}

// headOf reads partition p's checkpoint head (not the chunks it names,
// which a checkpoint replacing it meanwhile purges).
func headOf(t *testing.T, r *replica, p int) head {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _, err := r.in.store.get(ctx, headKey(p))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return head{}
	}
	if err != nil {
		t.Fatal(err)
	}
	h, err := unmarshalHead(v)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
