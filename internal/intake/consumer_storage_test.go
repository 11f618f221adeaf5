package intake

import (
	"context"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/series"
)

// seriesTestConfig is testConfig with series kept for a minute.
func seriesTestConfig() Config {
	cfg := testConfig()
	cfg.Series = series.Config{Window: time.Minute, FinishAfter: time.Minute, FlushInterval: 300 * time.Millisecond, Heartbeat: 30 * time.Second}
	return cfg
}

// startSeries submits two occurrences of key k through r and returns the
// first, which the second made a series.
func startSeries(t *testing.T, r *replica, k int) *eventgatev1.Event {
	t.Helper()
	ctx := context.Background()
	first := occurrence(k, "1")
	if res := submitOne(t, r.in, ctx, first, ""); res.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
		t.Fatalf("first: %+v", res)
	}
	if res := submitOne(t, r.in, ctx, occurrence(k, "2"), ""); res.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED {
		t.Fatalf("second: %+v", res)
	}
	return first
}

// TestPartitionConsumersAreKeptInMemory: the partitions' consumers write
// no state files (an owner resumes from its checkpoint), and a consumer an
// earlier version kept in a file is replaced at start, its partition's
// series going on under their uids.
func TestPartitionConsumersAreKeptInMemory(t *testing.T) {
	ns := startServer(t)
	cfg := seriesTestConfig()
	ctx := context.Background()

	a := startReplica(t, ns, "", "a", cfg)
	first := startSeries(t, a, 3)
	a.stop(t)

	// As an earlier version left it: partition p's consumer in a file.
	p := a.in.Partition(first)
	old := cfg.withDefaults().consumerConfig(p)
	old.MemoryStorage = false
	st, err := a.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteConsumer(ctx, old.Durable); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateConsumer(ctx, old); err != nil {
		t.Fatal(err)
	}

	b := startReplica(t, ns, "", "b", cfg)
	for i := 0; i < cfg.Partitions; i++ {
		c, err := st.Consumer(ctx, consumerName(i))
		if err != nil {
			t.Fatal(err)
		}
		if !c.CachedInfo().Config.MemoryStorage {
			t.Errorf("partition %d's consumer is file-backed", i)
		}
	}
	if r := submitOne(t, b.in, ctx, occurrence(3, "3"), ""); r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED || r.SeriesUID != first.Uid {
		t.Fatalf("third, after the consumer was replaced: %+v, want SERIES_COUNTED into %s", r, first.Uid)
	}
	waitFlushedCount(t, b.js, first.Uid, 3)
}

// TestLostPartitionConsumerIsCreatedAgain: a partition's consumer deleted
// under a running owner (as a memory consumer is lost when every server
// holding it restarts) is created again; the partition is taken over from
// its checkpoint and its series count on exactly.
func TestLostPartitionConsumerIsCreatedAgain(t *testing.T) {
	ns := startServer(t)
	cfg := seriesTestConfig()
	ctx := context.Background()
	a := startReplica(t, ns, "", "a", cfg)
	first := startSeries(t, a, 5)
	takeovers := a.in.Stats().Takeovers

	st, err := a.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	name := consumerName(a.in.Partition(first))
	if err := st.DeleteConsumer(ctx, name); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the consumer created again and taken over", func() bool {
		_, err := st.Consumer(ctx, name)
		return err == nil && a.in.Stats().Takeovers > takeovers
	})

	// Every occurrence logged while the consumer was gone or new counts once.
	const more = 5
	for i := 0; i < more; i++ {
		r := submitOne(t, a.in, ctx, occurrence(5, "after"), "")
		if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED || r.SeriesUID != first.Uid {
			t.Fatalf("occurrence %d after the consumer came back: %+v", i, r)
		}
	}
	waitFlushedCount(t, a.js, first.Uid, 2+more)
	if _, err := st.Consumer(ctx, name); err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
}
