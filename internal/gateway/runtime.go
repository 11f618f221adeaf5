package gateway

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TuneRuntime sets the garbage collector the way the gateway binary runs
// (Run calls it): GOGC to cfg.GCPercent and a soft memory limit from
// cfg.MemoryLimitMiB, unless the GOGC or GOMEMLIMIT environment variables
// set them already. It returns the memory limit it set, 0 for none.
//
// Why: the gateway's live heap is large and long-lived (the series keys it
// tracks for their window, the embedded NATS server's caches) while every
// event allocates briefly; with Go's default GOGC of 100 the collector
// re-marks that live heap after every few hundred megabytes allocated and
// took about a third of the CPU under load. A higher target collects less
// often; the memory limit keeps the heap from outgrowing the machine.
func TuneRuntime(cfg config.Config, log *slog.Logger) int64 {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(cfg.GCPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); set || cfg.MemoryLimitMiB < 0 {
		return 0
	}
	limit := cfg.MemoryLimitMiB << 20
	if limit == 0 {
		limit = defaultMemoryLimit(availableMemory())
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		log.Debug("go memory limit", "bytes", limit, "gcPercent", cfg.GCPercent)
	}
	return max(limit, 0)
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

// After a burst the heap the collector freed stays with the process: Go's
// scavenger returns memory only above the heap's next goal, which at GOGC
// 400 is five times the live heap, and the goal stays there while nothing
// allocates (the next collection is up to two minutes away). So a gateway
// that took 100,000 one-event Emits and then went quiet kept ~370 MiB of
// free heap resident. releaseWhenIdle returns it once the process has been
// quiet for a while: one collection and scavenge per quiet spell.
//
// Returned memory is not free to take back: when the load resumes, the
// heap grows again one page fault per 4 KiB page (about 14 µs each on a
// virtual machine, 3.5 ms of CPU per MiB), ~1.4 s of CPU for 400 MiB in the
// first seconds of the next burst, and every call of those seconds waits
// for it. Returned after 10 s of quiet, a load that resumed after a 20 s
// pause took 26-28k page faults a second in its first 4 s (7-8k with the
// heap kept), and its batch ack p99 over the next 20 s was 138-399 ms
// (median 179) against 60-180 ms (median 129) with the heap kept
// (BENCHMARKS.md, session 56). So only a gateway quiet for a minute
// returns it: pauses of seconds keep their heap.
const (
	idleInterval = 5 * time.Second
	// idleQuiet is how long the process must be quiet (idleSamples
	// intervals in a row below idleAllocRate) before its free heap is
	// returned.
	idleQuiet   = time.Minute
	idleSamples = int(idleQuiet / idleInterval)
	// idleAllocRate is the allocation rate below which the process is
	// quiet: under a load of a few hundred events a second it allocates
	// more (about 25 KB an event, watches included).
	idleAllocRate = 4 << 20 // bytes a second
	// idleMinFree is the least free heap worth a collection to return.
	idleMinFree = 64 << 20
)

// idleRelease decides, from one sample an interval, when to return the free
// heap to the operating system: once the process has allocated less than
// rate bytes in each of samples intervals in a row, if at least minFree
// bytes are free, and then not again until it has been busy.
type idleRelease struct {
	rate, minFree uint64
	samples       int
	prev          uint64 // bytes allocated up to the previous sample
	quiet         int    // intervals in a row below rate
	released      bool   // returned since the last busy interval
}

// newIdleRelease is the gateway's policy: idleSamples intervals of
// idleInterval below idleAllocRate, at least idleMinFree free.
func newIdleRelease() idleRelease {
	return idleRelease{rate: idleAllocRate * uint64(idleInterval/time.Second), minFree: idleMinFree, samples: idleSamples}
}

// observe takes the process's cumulative bytes allocated and its free heap
// not yet returned, and reports whether to return it now.
func (r *idleRelease) observe(allocated, free uint64) bool {
	d := allocated - r.prev
	r.prev = allocated
	if d >= r.rate {
		r.quiet, r.released = 0, false
		return false
	}
	r.quiet++
	if r.released || r.quiet < r.samples || free < r.minFree {
		return false
	}
	r.released = true
	return true
}

// releaseWhenIdle returns the free heap to the operating system in each
// quiet spell (idleRelease), until ctx ends.
func releaseWhenIdle(ctx context.Context, log *slog.Logger) {
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	r := newIdleRelease()
	t := time.NewTicker(idleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		if samples[0].Value.Kind() != metrics.KindUint64 || samples[1].Value.Kind() != metrics.KindUint64 {
			return // not this runtime's metrics
		}
		if free := samples[1].Value.Uint64(); r.observe(samples[0].Value.Uint64(), free) {
			debug.FreeOSMemory()
			log.Debug("quiet: free heap returned to the system", "bytes", free)
		}
	}
}
