package series

import (
	"fmt"
	"testing"
	"time"

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
//   - series-100k: as many series as MaxActive allows, cycled; every key
//     is touched once a second, so flushes come with 1 in 30 visits.
//   - new-keys: every occurrence a key that is not tracked (a singleton
//     written as Created), at the cap, so each one evicts the oldest.
func BenchmarkObserve(b *testing.B) {
	for _, bc := range []struct {
		name string
		keys int
		cap  int
		warm bool
	}{
		{name: "series-100", keys: 100, warm: true},
		{name: "series-100k", keys: 100_000, warm: true},
		{name: "new-keys", keys: 200_000, cap: 100_000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			evs := benchEvents(bc.keys)
			a, err := New(Config{MaxActive: bc.cap})
			if err != nil {
				b.Fatal(err)
			}
			at := t0
			var pos uint64
			if bc.warm {
				for range 2 {
					for _, ev := range evs {
						pos++
						at = at.Add(10 * time.Microsecond)
						a.Observe(ev, at, pos)
					}
				}
			}
			writes := a.Stats().TotalWrites()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				pos++
				at = at.Add(10 * time.Microsecond)
				a.Observe(evs[i%len(evs)], at, pos)
			}
			b.StopTimer()
			b.ReportMetric(float64(a.Stats().TotalWrites()-writes)/float64(b.N), "writes/op")
		})
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
			a.Observe(ev, at, pos)
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
