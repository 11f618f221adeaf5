package series

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

func benchEvents(n int) []*eventgatev1.Event {
	evs := make([]*eventgatev1.Event, n)
	for i := range evs {
		evs[i] = mkEvent(fmt.Sprintf("u%d", i), func(ev *eventgatev1.Event) {
			ev.Regarding.Name = fmt.Sprintf("payment-api-7d9f8c6b5-%06d", i)
			ev.Regarding.Uid = "5f3c1a2e-8d4b-4e6f-9a7c-1b2d3e4f5a6b"
		})
	}
	return evs
}

// BenchmarkObserve measures one occurrence, log time advancing 10µs per
// occurrence (100,000 a second into one partition).
//
//   - series-100: 100 hot series (the load test); almost every
//     occurrence is Counted, flushes every 30 s of log time are included.
//   - series-100k: 100,000 series (within a budget that holds them), cycled; every key
//     is touched once a second, so flushes come with 1 in 30 visits.
//   - new-keys: every occurrence a key that is not tracked (a singleton
//     written as Created), at the cap, so each one evicts the oldest.
//   - new-keys-1000-tenants: the same, the keys spread over 1,000 tenants
//     in turn (as the full-scale bench's workload): the tenants track
//     about as many each, so each eviction takes the oldest singleton.
func BenchmarkObserve(b *testing.B) {
	for _, bc := range []struct {
		name   string
		keys   int
		cap    int
		budget int64
		warm   bool
		// tenants spreads the events over this many tenants, in turn.
		tenants int
	}{
		{name: "series-100", keys: 100, warm: true},
		{name: "series-100k", keys: 100_000, warm: true, budget: 1 << 30},
		{name: "new-keys", keys: 200_000, cap: 100_000},
		{name: "new-keys-1000-tenants", keys: 200_000, cap: 100_000, tenants: 1000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			evs := benchEvents(bc.keys)
			for i, ev := range evs {
				if bc.tenants > 0 {
					ev.Tenant.Name = "tenant-" + strconv.Itoa(i%bc.tenants)
				}
			}
			raws := encodeAll(b, evs)
			a, err := New(Config{MaxActive: bc.cap, MaxBytes: bc.budget})
			if err != nil {
				b.Fatal(err)
			}
			// Position p holds evs[(p-1) % len(evs)].
			a.SetReader(func(pos uint64) ([]byte, error) { return raws[(pos-1)%uint64(len(raws))], nil })
			at := t0
			var pos uint64
			if bc.warm {
				for k := range 2 {
					for _, ev := range evs {
						pos++
						at = at.Add(10 * time.Microsecond)
						must(a.ObserveEncoded(ev, raws[pos-1-uint64(k)*uint64(len(evs))], at, pos))
					}
				}
			}
			writes := a.Stats().TotalWrites()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				pos++
				at = at.Add(10 * time.Microsecond)
				must(a.ObserveEncoded(evs[i%len(evs)], raws[i%len(evs)], at, pos))
			}
			b.StopTimer()
			b.ReportMetric(float64(a.Stats().TotalWrites()-writes)/float64(b.N), "writes/op")
		})
	}
}

func encodeAll(tb testing.TB, evs []*eventgatev1.Event) [][]byte {
	raws := make([][]byte, len(evs))
	for i, ev := range evs {
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
		if err != nil {
			tb.Fatal(err)
		}
		raws[i] = raw
	}
	return raws
}

// BenchmarkTrackedSingletonBytes reports what a tracked singleton costs:
// the Go heap in use after a collection, per singleton, once a million
// distinct events are tracked (the ring of recent encodings excluded: its
// size is a fixed share of the budget, whatever is tracked), and the
// estimate the memory budget counts.
func BenchmarkTrackedSingletonBytes(b *testing.B) {
	const n = 1_000_000
	evs := benchEvents(1)
	raw := encodeAll(b, evs)[0]
	for b.Loop() {
		a, err := New(Config{MaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ev := evs[0]
		at := t0
		for i := range n {
			ev.Regarding.Name = strconv.Itoa(i)
			at = at.Add(time.Microsecond)
			must(a.ObserveEncoded(ev, raw, at, uint64(i+1)))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		s := a.Stats()
		if s.Keys != n {
			b.Fatalf("%d keys tracked, want %d", s.Keys, n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc-uint64(len(a.single.recent.buf)))/n, "heap-bytes/singleton")
		b.ReportMetric(float64(s.Bytes-int64(a.single.recent.max))/n, "budget-bytes/singleton")
		runtime.KeepAlive(a)
	}
}

func BenchmarkKeyOf(b *testing.B) {
	ev := benchEvents(1)[0]
	b.ReportAllocs()
	for b.Loop() {
		_ = KeyOf(ev)
	}
}

// BenchmarkSnapshot reports the cost and size of a checkpoint of 10,000
// tracked keys (half singletons, half series).
func BenchmarkSnapshot(b *testing.B) {
	evs := benchEvents(10_000)
	a, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	at := t0
	var pos uint64
	for i, ev := range evs {
		for range 1 + i%2*2 {
			pos++
			at = at.Add(10 * time.Microsecond)
			must(a.Observe(ev, at, pos))
		}
	}
	var size int
	b.Run("snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, err := a.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			size = len(s)
		}
		b.ReportMetric(float64(size)/float64(len(evs)), "bytes/key")
	})
	s, _ := a.Snapshot()
	b.Run("restore", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Restore(Config{}, s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
