package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// Go's soft memory limit bounds what Go's runtime holds. With the embedded
// engine the process holds more beside it: the library's pages and the
// engine's own allocations (its inserts, merges and caches), which rise and
// fall with the ingest. Under a full write load the Go side sat at its
// limit (1 GiB) while the engine held 400–800 MiB more, so the resident set
// depended on both and had no bound of its own.
//
// A memory budget bounds the whole process: every budgetInterval the
// gateway reads its resident set, subtracts what Go's runtime holds
// (mapped and not returned: what the Go limit counts), and sets the Go limit
// to the budget less the rest. The engine's memory jumps within an insert
// or a merge, faster than the collector can give way, so the rest is taken
// at its recent high (it follows a rise at once and falls back by
// budgetDecay a second) plus budgetMargin, for what the process adds
// before the Go side gives way to a new high, and at least budgetReserve.
// The Go side gives way while the engine holds more, down to half its
// configured limit (below that the collector would run back to back over
// the live heap), and takes it back when the engine has held less for a
// while. The limit never rises above the configured one.

// budgetInterval is how often the Go limit follows the budget: the engine's
// memory moves with its inserts (every --ingest-batch-wait) and merges, by
// up to 160 MiB within 100 ms. A reading costs tens of microseconds.
const budgetInterval = 100 * time.Millisecond

// budgetMargin is what the Go limit leaves below the budget for what the
// process adds between a new high outside Go and the Go side giving way
// (a reading, then a collection): at 250 ms readings and no margin, the
// peak of a full write phase on a 10M-event store was 1,587–1,611 MiB
// against the 1,536 MiB budget (BENCHMARKS.md, sessions 46–47).
const budgetMargin = 64 << 20

// budgetReserve is the least the budget keeps for memory outside Go (the
// margin included), so
// that the Go side is within its share before the engine's first burst:
// the library's pages (~200 MiB) and what the engine holds under a full
// ingest (in two full write phases on 2 cores, four readings a second, the
// memory outside Go was 391–405 MiB at the median, 553–578 at the p99, 598
// and 614 MiB at most). 640 MiB held the write phase's peak at 1.50–1.57
// GiB at 14–20k events/s; 704 MiB at 1.42 GiB, for 5–10% more of the
// collector's and the Go side's CPU per event (BENCHMARKS.md, session 37).
const budgetReserve = 704 << 20

// budgetDecay is how fast the recent high of the memory outside Go falls
// back, in bytes a second: 200 MiB in 25 s, several inserts.
const budgetDecay = 8 << 20

// budgetStep is the least change of the Go limit worth making.
const budgetStep = 8 << 20

// defaultBudgetHeadroom is what the default budget leaves the embedded
// engine above the Go limit: its library's resident pages (~200 MiB) and its
// allocations under a steady ingest.
const defaultBudgetHeadroom = 512 << 20

// memoryBudget is the resident memory the process keeps under and the range
// the Go limit moves in to keep it there.
type memoryBudget struct {
	budget  int64 // bytes of the whole process's resident set
	ceiling int64 // the configured Go limit: the Go limit never goes above it
	floor   int64 // the Go limit never goes below it
	reserve int64 // bytes kept for memory outside Go at the least
	margin  int64 // bytes the Go limit leaves below the budget besides
}

// goLimit is the Go memory limit that keeps the process within its budget
// while it holds up to high bytes resident beside Go's runtime: it leaves
// them and the margin, and at least the reserve.
func (b memoryBudget) goLimit(high int64) int64 {
	return min(max(b.budget-max(high+b.margin, b.reserve), b.floor), b.ceiling)
}

// newMemoryBudget is the budget cfg sets for a process whose Go limit is
// goLimit (TuneRuntime's), and false when there is none: no Go limit, the
// GOMEMLIMIT variable pinned it, the budget is off (-1), or the default
// budget with a shared ClickHouse (nothing outside Go to make room for).
func newMemoryBudget(cfg config.Config, goLimit int64) (memoryBudget, bool) {
	if goLimit <= 0 || cfg.MemoryBudgetMiB < 0 {
		return memoryBudget{}, false
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return memoryBudget{}, false
	}
	budget := cfg.MemoryBudgetMiB << 20
	if budget == 0 {
		if cfg.ClickHouse.DSN != "" {
			return memoryBudget{}, false
		}
		budget = goLimit + defaultBudgetHeadroom
	}
	b := memoryBudget{budget: budget, ceiling: goLimit, floor: goLimit / 2, margin: budgetMargin}
	if cfg.ClickHouse.DSN == "" {
		b.reserve = budgetReserve
	}
	return b, true
}

// budgetFollower keeps the Go limit at its budget's goLimit.
type budgetFollower struct {
	b       memoryBudget
	log     *slog.Logger
	samples []metrics.Sample
	limit   int64 // the Go limit set last
	outside int64 // bytes resident outside Go's runtime at the last reading
	high    int64 // their recent high
	decay   int64 // bytes high falls back at each step
}

func newBudgetFollower(b memoryBudget, log *slog.Logger) *budgetFollower {
	return &budgetFollower{b: b, log: log, limit: b.ceiling, decay: int64(budgetDecay * budgetInterval / time.Second), samples: []metrics.Sample{
		{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"},
	}}
}

// step reads the resident set once and moves the Go limit if it is off by
// budgetStep or more.
func (f *budgetFollower) step() error {
	rss, err := residentBytes()
	if err != nil {
		return err
	}
	metrics.Read(f.samples)
	if f.samples[0].Value.Kind() != metrics.KindUint64 || f.samples[1].Value.Kind() != metrics.KindUint64 {
		return fmt.Errorf("memory budget: the runtime has no %s", f.samples[0].Name)
	}
	goHeld := int64(f.samples[0].Value.Uint64() - f.samples[1].Value.Uint64())
	f.outside = max(rss-goHeld, 0)
	f.high = max(f.outside, f.high-f.decay)
	if want := f.b.goLimit(f.high); abs64(want-f.limit) >= budgetStep || (want != f.limit && (want == f.b.ceiling || want == f.b.floor)) {
		debug.SetMemoryLimit(want)
		f.limit = want
	}
	return nil
}

// run follows the budget until ctx ends, then gives the Go limit back its
// configured value.
func (f *budgetFollower) run(ctx context.Context) {
	t := time.NewTicker(budgetInterval)
	defer t.Stop()
	defer debug.SetMemoryLimit(f.b.ceiling)
	for {
		if err := f.step(); err != nil {
			f.log.Warn("memory budget not followed", "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// collectors export the budget, what the process holds outside Go's
// runtime, and (with go_gc_gomemlimit_bytes) the limit it leaves Go.
func (f *budgetFollower) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eventgate_memory_budget_bytes",
			Help: "Resident memory the whole process keeps under (--memory-budget-mib): the Go memory limit is lowered by what the process holds outside Go's runtime."},
			func() float64 { return float64(f.b.budget) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eventgate_memory_outside_go_bytes",
			Help: "Resident memory outside Go's runtime at the budget's last reading: the embedded engine's allocations and its library's pages."},
			func() float64 { return float64(f.outside) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "eventgate_memory_outside_go_high_bytes",
			Help: "The recent high of eventgate_memory_outside_go_bytes, which the Go memory limit makes room for."},
			func() float64 { return float64(f.high) }),
	}
}

// residentBytes is this process's resident set (/proc/self/statm).
func residentBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("memory budget: %w", err)
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("memory budget: /proc/self/statm: %q", b)
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory budget: /proc/self/statm: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
