package gateway

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestTuneRuntime: the binary's collector target and memory limit come from
// the configuration (a quarter of the memory available, at most 1 GiB, by
// default) unless GOGC or
// GOMEMLIMIT set them.
func TestTuneRuntime(t *testing.T) {
	for _, v := range []string{"GOGC", "GOMEMLIMIT"} {
		if old, set := os.LookupEnv(v); set {
			os.Unsetenv(v)
			t.Cleanup(func() { os.Setenv(v, old) })
		}
	}
	prevGC := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevLimit) })
	log := slog.New(slog.DiscardHandler)

	cfg := config.Default()
	TuneRuntime(cfg, log)
	if got := debug.SetGCPercent(100); got != cfg.GCPercent {
		t.Errorf("GOGC %d, want %d", got, cfg.GCPercent)
	}
	if avail := availableMemory(); avail <= 0 {
		t.Errorf("available memory %d", avail)
	} else if got, want := debug.SetMemoryLimit(math.MaxInt64), min(avail/4, 1<<30); got != want {
		t.Errorf("memory limit %d, want a quarter of %d, at most 1 GiB", got, avail)
	}

	cfg.GCPercent, cfg.MemoryLimitMiB = 250, 1024
	TuneRuntime(cfg, log)
	if got := debug.SetGCPercent(100); got != 250 {
		t.Errorf("GOGC %d, want 250", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != 1024<<20 {
		t.Errorf("memory limit %d, want 1024 MiB", got)
	}

	t.Setenv("GOGC", "100")
	cfg.MemoryLimitMiB = -1
	TuneRuntime(cfg, log)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC %d with GOGC=100 in the environment", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("memory limit %d with -1, want none", got)
	}
}

// After a busy spell the free heap is returned once the process has been
// quiet for idleSamples intervals in a row, if enough is free, and not again
// until it has been busy.
func TestFreeHeapReturnedOnceAQuietSpellFollowsABusyOne(t *testing.T) {
	const rate, minFree = 100, 1000
	r := idleRelease{rate: rate, minFree: minFree, samples: 2}
	var allocated uint64
	step := func(alloc, free uint64) bool {
		allocated += alloc
		return r.observe(allocated, free)
	}
	steps := []struct {
		alloc, free uint64
		want        bool
		what        string
	}{
		{5000, 5000, false, "busy"},
		{10, 5000, false, "first quiet interval"},
		{10, 5000, true, "second quiet interval: returned"},
		{10, 5000, false, "still quiet: not again"},
		{0, 5000, false, "still quiet: not again"},
		{rate, 5000, false, "busy again"},
		{0, 5000, false, "first quiet interval"},
		{0, minFree - 1, false, "quiet, too little free"},
		{0, minFree, true, "quiet, enough free: returned"},
		{10, 5000, false, "still quiet: not again"},
	}
	for i, s := range steps {
		if got := step(s.alloc, s.free); got != s.want {
			t.Fatalf("step %d (%s): release %v, want %v", i, s.what, got, s.want)
		}
	}
}

// The gateway keeps its free heap through a pause of less than a minute
// (taking it back when the load resumes costs a page fault per page) and
// returns it once it has been quiet for a minute.
func TestFreeHeapKeptThroughPausesShorterThanAMinute(t *testing.T) {
	r := newIdleRelease()
	const free = 512 << 20
	var allocated uint64
	interval := func(bytesPerSecond uint64) bool {
		allocated += bytesPerSecond * uint64(idleInterval/time.Second)
		return r.observe(allocated, free)
	}
	pause := func(d time.Duration) (releasedAfter time.Duration) {
		for elapsed := idleInterval; elapsed <= d; elapsed += idleInterval {
			if interval(1 << 20) { // 1 MiB/s: quiet
				return elapsed
			}
		}
		return 0
	}
	for range 3 {
		interval(100 << 20) // a busy interval
		if after := pause(55 * time.Second); after != 0 {
			t.Fatalf("free heap returned %v into a pause of 55s", after)
		}
	}
	interval(100 << 20)
	if after := pause(2 * time.Minute); after != time.Minute {
		t.Fatalf("free heap returned %v into a pause of 2m, want after 1m0s", after)
	}
}
