package clickhouse

import "testing"

// Config.MergeThreads: 0 is one merge for every two CPUs the process may
// use, at least one; -1 leaves the engine's own pool; a count is taken as
// it is.
func TestMergeThreadsDefaultIsOneForEveryTwoCPUs(t *testing.T) {
	for _, c := range []struct{ n, cpus, want int }{
		{0, 1, 1}, {0, 2, 1}, {0, 3, 1}, {0, 8, 4},
		{-1, 2, 0}, {-1, 8, 0},
		{3, 2, 3},
	} {
		if got := mergeThreads(c.n, c.cpus); got != c.want {
			t.Errorf("mergeThreads(%d, %d CPUs) = %d, want %d", c.n, c.cpus, got, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.MergeThreads = -2
	if err := cfg.Validate(); err == nil {
		t.Error("MergeThreads -2 validated")
	}
}
