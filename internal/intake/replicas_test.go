package intake

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/natstest"
	"github.com/eventgate/eventgate/internal/series"
)

// loadConfig is the configuration of the many-occurrence tests: a finish
// interval long enough that no pause of the emitters (a takeover under the
// race detector) splits a series.
func loadConfig() Config {
	cfg := testConfig()
	cfg.DecisionTimeout = 2 * time.Second
	cfg.Series = series.Config{Window: 8 * time.Second, FinishAfter: 8 * time.Second, FlushInterval: time.Second, Heartbeat: 4 * time.Second}
	return cfg
}

const nSeries = 100

// report logs a load's figures: the write reduction factor is occurrences
// per message in the events stream; the intake log is counted apart (an
// entry per occurrence with a message id, a batch of them without, and ticks).
func report(t *testing.T, l *load, replicas []*replica, events, intake uint64) {
	t.Helper()
	occ := uint64(l.series * l.perSeries)
	t.Logf("%d series x %d occurrences through %d replicas in %v (%.0f occurrences/s)", l.series, l.perSeries, len(replicas),
		l.elapsed.Round(time.Millisecond), float64(occ)/l.elapsed.Seconds())
	t.Logf("events stream: %d writes for %d occurrences: write reduction factor %.1f; intake log: %d entries",
		events, occ, float64(occ)/float64(events), intake)
	t.Logf("Submit outcomes: %v; Submits failed in flight %d, their occurrences resubmitted %d, of which already logged %d",
		l.outcomes, l.failedBatches, l.retried, l.retriedDuplicates)
	for _, r := range replicas {
		st := r.in.Stats()
		t.Logf("replica %s: occurrences %d folded %d duplicates %d writes %v takeovers %d resyncs %d checkpoints %d ticks %d",
			r.name, st.Occurrences, st.Folded, st.Duplicates, st.Writes, st.Takeovers, st.Resyncs, st.Checkpoints, st.Ticks)
	}
}

// startPair starts replicas a and b on ns and waits until they share the
// partitions.
func startPair(t *testing.T, ns *server.Server, cfg Config) (a, b *replica, rs []*replica) {
	t.Helper()
	a = startReplica(t, ns, "", "a", cfg)
	b = startReplica(t, ns, "", "b", cfg)
	rs = []*replica{a, b}
	waitBalanced(t, rs, cfg.Partitions)
	return a, b, rs
}

// TestTwoReplicas spreads 100 interleaved series over two replicas on one
// server: one series per key, each with its exact count.
func TestTwoReplicas(t *testing.T) {
	ns := startServer(t)
	cfg := loadConfig()
	a, _, rs := startPair(t, ns, cfg)
	l := emit(t, rs, nSeries, *flagOccurrences, 4, nil)
	events := checkSeries(t, a.js, l, 60*time.Second)
	report(t, l, rs, events, streamMsgs(t, a.js, cfg.Stream))
	if n := l.outcomes[eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED]; n != nSeries {
		t.Errorf("%d SERIES_STARTED results, want %d", n, nSeries)
	}
	if max := uint64(nSeries * (4 + 2*int(l.elapsed/time.Second+10))); events > max {
		t.Errorf("%d writes to the events stream, want at most %d", events, max)
	}
}

// TestReplicaKilled kills one of two replicas halfway, without a
// checkpoint: its partitions are taken over from their last checkpoint and
// every count is still exact; batches that failed on it are retried with
// the same message ids on the other and counted once.
func TestReplicaKilled(t *testing.T) {
	ns := startServer(t)
	cfg := loadConfig()
	// A series finishes after FinishAfter of log time without an
	// occurrence: the kill, the takeover and the retries must not pause the
	// whole load that long, even under the race detector on a loaded
	// machine (where 8s was seen to pass, and every series rightly
	// finished and started anew).
	cfg.Series.Window, cfg.Series.FinishAfter = 20*time.Second, 20*time.Second
	a, b, rs := startPair(t, ns, cfg)
	var owned int
	l := emit(t, rs, nSeries, *flagOccurrences, 4, func(n int) {
		if n == *flagOccurrences/2 {
			owned = b.in.Stats().OwnedPartitions
			b.kill()
		}
	})
	t.Logf("killed replica b owning %d of %d partitions", owned, cfg.Partitions)
	events := checkSeries(t, a.js, l, 90*time.Second)
	report(t, l, rs, events, streamMsgs(t, a.js, cfg.Stream))
	if st := a.in.Stats(); st.OwnedPartitions != cfg.Partitions {
		t.Errorf("survivor owns %d partitions, want %d", st.OwnedPartitions, cfg.Partitions)
	}
}

// TestReplicasOnCluster runs two replicas on different nodes of a 3-node
// JetStream cluster with replicated streams and bucket.
func TestReplicasOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	cl := natstest.StartCluster(t, 3)
	cfg := loadConfig()
	cfg.Replicas = 3
	a := startReplica(t, nil, cl.Servers[0].ClientURL(), "a", cfg)
	b := startReplica(t, nil, cl.Servers[2].ClientURL(), "b", cfg)
	rs := []*replica{a, b}
	waitBalanced(t, rs, cfg.Partitions)
	l := emit(t, rs, nSeries, *flagClusterOcc, 4, nil)
	events := checkSeries(t, a.js, l, 90*time.Second)
	report(t, l, rs, events, streamMsgs(t, a.js, cfg.Stream))
}

// TestReplicaStopped stops one of two replicas gracefully halfway: it
// checkpoints and hands its partitions over, and the counts stay exact.
// With message ids every occurrence is an intake entry of its own; without
// (batched), occurrences share one entry per partition and Submit, the
// partitions resume from checkpoints taken between batched entries, and the
// log holds far fewer entries than occurrences.
func TestReplicaStopped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		withIDs bool
	}{{"ids", true}, {"batched", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := startServer(t)
			cfg := loadConfig()
			a, b, rs := startPair(t, ns, cfg)
			n := *flagOccurrences / 4
			l := emitWith(t, rs, nSeries, n, 4, func(i int) {
				if i == n/2 {
					b.stop(t)
				}
			}, tc.withIDs)
			events := checkSeries(t, a.js, l, 60*time.Second)
			entries := streamMsgs(t, a.js, cfg.Stream)
			report(t, l, rs, events, entries)
			if l.failedBatches != 0 {
				t.Errorf("%d Submits failed in flight on a graceful stop", l.failedBatches)
			}
			// Batched: 100 occurrences a Submit over 16 partitions make
			// about 16 entries, not 100 (ticks add a few).
			if occ := uint64(nSeries * n); !tc.withIDs && entries > occ/3 {
				t.Errorf("intake log: %d entries for %d occurrences; want batched entries (at most %d)", entries, occ, occ/3)
			}
		})
	}
}
