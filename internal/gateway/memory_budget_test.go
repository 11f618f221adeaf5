package gateway

import (
	"log/slog"
	"math"
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestMemoryBudgetDefaultsLeaveTheEmbeddedEngineRoom: by default the budget
// is the Go limit plus 512 MiB with the embedded engine, and there is none
// with a shared ClickHouse, with -1, without a Go limit, or when GOMEMLIMIT
// pins the Go limit.
func TestMemoryBudgetDefaultsLeaveTheEmbeddedEngineRoom(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	syscall.Unsetenv("GOMEMLIMIT") // t.Setenv restores it afterwards
	const goLimit = 1 << 30
	cfg := config.Default()
	b, ok := newMemoryBudget(cfg, goLimit)
	if !ok || b.budget != goLimit+512<<20 || b.ceiling != goLimit || b.floor != goLimit/2 || b.reserve != budgetReserve || b.margin != budgetMargin {
		t.Errorf("embedded engine: budget %+v, %v; want 1.5 GiB, the Go limit 1 GiB down to 512 MiB, 704 MiB kept for the engine, a 64 MiB margin", b, ok)
	}
	cfg.MemoryBudgetMiB = 2048
	if b, ok := newMemoryBudget(cfg, goLimit); !ok || b.budget != 2048<<20 {
		t.Errorf("--memory-budget-mib 2048: budget %+v, %v", b, ok)
	}
	cfg.MemoryBudgetMiB = -1
	if b, ok := newMemoryBudget(cfg, goLimit); ok {
		t.Errorf("--memory-budget-mib -1: budget %+v", b)
	}
	cfg.MemoryBudgetMiB = 0
	if b, ok := newMemoryBudget(cfg, 0); ok {
		t.Errorf("no Go limit: budget %+v", b)
	}
	shared := cfg
	shared.ClickHouse.DSN = "clickhouse://ch:9000"
	if b, ok := newMemoryBudget(shared, goLimit); ok {
		t.Errorf("shared ClickHouse: budget %+v", b)
	}
	shared.MemoryBudgetMiB = 1536
	if b, ok := newMemoryBudget(shared, goLimit); !ok || b.reserve != 0 {
		t.Errorf("shared ClickHouse with --memory-budget-mib 1536: budget %+v, %v; want one with nothing kept for an engine", b, ok)
	}
	t.Setenv("GOMEMLIMIT", "800MiB")
	if b, ok := newMemoryBudget(cfg, goLimit); ok {
		t.Errorf("GOMEMLIMIT set: budget %+v", b)
	}
}

// TestGoLimitGivesWayToMemoryOutsideGo: the Go limit is the budget less
// what the process holds outside Go's runtime and the margin (together at
// least the reserve), never above the configured limit nor below its floor.
func TestGoLimitGivesWayToMemoryOutsideGo(t *testing.T) {
	b := memoryBudget{budget: 1536 << 20, ceiling: 1 << 30, floor: 512 << 20, reserve: 704 << 20, margin: 64 << 20}
	for _, c := range []struct{ outside, want int64 }{
		{0, 832 << 20},         // the reserve
		{512 << 20, 832 << 20}, // 576 with the margin: the reserve
		{700 << 20, 772 << 20}, // 764 with the margin
		{1 << 30, 512 << 20},
		{4 << 30, 512 << 20},
	} {
		if got := b.goLimit(c.outside); got != c.want {
			t.Errorf("outside %d MiB: Go limit %d MiB, want %d", c.outside>>20, got>>20, c.want>>20)
		}
	}
	b.budget = 2560 << 20
	if got := b.goLimit(512 << 20); got != 1<<30 {
		t.Errorf("a 2.5 GiB budget, 512 MiB outside: Go limit %d MiB, want the configured 1024", got>>20)
	}
}

// TestMemoryBudgetFollowsMemoryHeldOutsideGo: memory the process maps and
// touches outside Go's runtime (as the embedded engine's allocator does)
// lowers the Go limit by as much at once, and raises it again as its recent
// high falls back once it is returned.
func TestMemoryBudgetFollowsMemoryHeldOutsideGo(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	f := newBudgetFollower(memoryBudget{}, slog.New(slog.DiscardHandler))
	if err := f.step(); err != nil { // the zero budget only reads
		t.Fatal(err)
	}
	const ceiling, outsideMapped = 1 << 30, 256 << 20
	f.b = memoryBudget{budget: f.outside + ceiling, ceiling: ceiling, floor: ceiling / 4}
	f.limit = ceiling
	debug.SetMemoryLimit(ceiling) // as TuneRuntime sets it
	if err := f.step(); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != ceiling {
		t.Fatalf("before: Go limit %d MiB, want %d", got>>20, ceiling>>20)
	}

	mem, err := syscall.Mmap(-1, 0, outsideMapped, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	if err := f.step(); err != nil {
		t.Fatal(err)
	}
	// Other goroutines' work moves the resident set by a few MiB.
	want, tol := int64(ceiling-outsideMapped), int64(32<<20)
	if got := debug.SetMemoryLimit(-1); abs64(got-want) > tol {
		t.Errorf("with %d MiB outside Go: Go limit %d MiB, want %d ± %d", outsideMapped>>20, got>>20, want>>20, tol>>20)
	}

	if err := syscall.Munmap(mem); err != nil {
		t.Fatal(err)
	}
	if err := f.step(); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); abs64(got-want) > tol {
		t.Errorf("right after it is returned: Go limit %d MiB, want it still at %d ± %d", got>>20, want>>20, tol>>20)
	}
	for range outsideMapped / f.decay {
		if err := f.step(); err != nil {
			t.Fatal(err)
		}
	}
	if got := debug.SetMemoryLimit(-1); abs64(got-ceiling) > tol {
		t.Errorf("after: Go limit %d MiB, want %d ± %d", got>>20, ceiling>>20, tol>>20)
	}
}
