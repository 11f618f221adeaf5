package gateway

import (
	"bufio"
	"bytes"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TuneRuntime sets the garbage collector the way the gateway binary runs
// (Run calls it): GOGC to cfg.GCPercent and a soft memory limit from
// cfg.MemoryLimitMiB, unless the GOGC or GOMEMLIMIT environment variables
// set them already.
//
// Why: the gateway's live heap is large and long-lived (the series keys it
// tracks for their window, the embedded NATS server's caches) while every
// event allocates briefly; with Go's default GOGC of 100 the collector
// re-marks that live heap after every few hundred megabytes allocated and
// took about a third of the CPU under load. A higher target collects less
// often; the memory limit keeps the heap from outgrowing the machine.
func TuneRuntime(cfg config.Config, log *slog.Logger) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(cfg.GCPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); set || cfg.MemoryLimitMiB < 0 {
		return
	}
	limit := cfg.MemoryLimitMiB << 20
	if limit == 0 {
		limit = defaultMemoryLimit(availableMemory())
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		log.Debug("go memory limit", "bytes", limit, "gcPercent", cfg.GCPercent)
	}
}

// maxDefaultLimit caps the default memory limit. Under a full emit load
// the live heap is about 400 MiB (tracked series keys at their 128 MiB
// budget, the embedded NATS server's duplicate-window ids and subject
// trees, the ingest's batches); at a 512 MiB cap the collector ran back to
// back and throughput fell run after run (the full-scale bench at
// 104224e), while GOGC 400 without a cap let the heap grow to five times
// the live heap.
const maxDefaultLimit = 1 << 30

// defaultMemoryLimit is the memory limit for avail bytes of memory: a
// quarter of it, at most maxDefaultLimit.
func defaultMemoryLimit(avail int64) int64 { return min(avail/4, maxDefaultLimit) }

// availableMemory is the cgroup's memory limit, else the machine's memory;
// 0 when neither can be read.
func availableMemory() int64 {
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
			return v
		}
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
