package intake

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// BenchmarkSubmit measures occurrences per second through Submit, in
// batches of 100 from 8 concurrent callers, on the embedded server with
// default series timers, and the write reduction factor: occurrences per
// message in the events stream. "series": each batch is one occurrence of
// each of 100 series; "distinct": every occurrence is a new key (each one a
// singleton, the costliest path: one intake entry and one events write).
func BenchmarkSubmit(b *testing.B) {
	for _, bc := range []struct {
		name     string
		replicas int
		distinct bool
	}{{"series/replicas=1", 1, false}, {"series/replicas=2", 2, false}, {"distinct/replicas=1", 1, true}} {
		replicas := bc.replicas
		b.Run(bc.name, func(b *testing.B) {
			ns := startServer(b)
			cfg := DefaultConfig()
			var rs []*replica
			for i := 0; i < replicas; i++ {
				rs = append(rs, startReplica(b, ns, "", fmt.Sprintf("r%d", i), cfg))
			}
			waitBalanced(b, rs, cfg.Partitions)
			const batch, workers = 100, 8
			batches := (b.N + batch - 1) / batch
			next := make(chan int)
			var wg sync.WaitGroup
			var undecided int
			var mu sync.Mutex
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					evs := make([]*eventgatev1.Event, batch)
					for n := range next {
						for k := range evs {
							if bc.distinct {
								evs[k] = occurrence(n*batch+k, "bench")
							} else {
								evs[k] = occurrence(k, "bench")
							}
						}
						res, err := rs[n%len(rs)].in.Submit(context.Background(), evs, nil)
						if err != nil {
							b.Error(err)
							return
						}
						for _, r := range res {
							if r.Outcome == eventgatev1.EmitOutcome_EMIT_OUTCOME_UNSPECIFIED {
								mu.Lock()
								undecided++
								mu.Unlock()
							}
						}
					}
				}()
			}
			for n := 0; n < batches; n++ {
				next <- n
			}
			close(next)
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			occ := batches * batch
			var st Stats
			waitFor(b, 30*time.Second, "every occurrence folded", func() bool {
				st = Stats{}
				for _, r := range rs {
					s := r.in.Stats()
					st.Occurrences += s.Occurrences
				}
				return st.Occurrences >= uint64(occ)
			})
			events := streamMsgs(b, rs[0].js, "EVENTS")
			b.ReportMetric(float64(occ)/elapsed.Seconds(), "occurrences/s")
			b.ReportMetric(float64(occ)/float64(max(events, 1)), "occurrences/write")
			b.ReportMetric(float64(undecided)/float64(occ), "undecided/op")
		})
	}
}
