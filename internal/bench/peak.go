package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// peakWatch samples a gateway's resident set every peakEvery and, each time
// it is the highest seen, what the gateway's /metrics say of it: what Go's
// runtime holds against the rest (eventgate_memory_outside_go_bytes, the
// embedded engine), the Go heap in use and the Go limit the memory budget
// set. VmHWM can be higher than the highest sample (a burst between two);
// the split at the highest sample says which side the peak came from.
type peakWatch struct {
	mu     sync.Mutex
	at     peakSample
	top    float64 // the highest sample, MiB (at is within peakStep of it)
	phase  string
	cancel context.CancelFunc
	done   chan struct{}
}

// peakSample is one reading, in MiB.
type peakSample struct {
	when                                   time.Time
	phase                                  string
	rss, outside, outsideHigh, heap, goLim float64
	// what the engine's tracker counts, and its merges', inserts' and
	// reads' part of it (NaN when the engine's collector did not answer)
	engine, merges, inserts, reads float64
	top                            float64 // the highest sample (highest only)
	metricsErr                     error
}

// peakEvery is how often the resident set is read; peakStep is how much
// higher than the recorded high a sample must be to scrape /metrics again.
// A scrape costs the gateway CPU (its collectors query the engine): while
// the resident set climbs, a scrape at every new high took 8% of a core
// from the phase it measured.
const (
	peakEvery = 250 * time.Millisecond
	peakStep  = 8 // MiB
)

// peakMetrics are the series a sample reads: the memory budget's, Go's,
// then the engine's (which may be missing).
var peakMetrics = []string{"eventgate_memory_outside_go_bytes", "eventgate_memory_outside_go_high_bytes",
	"go_memstats_heap_inuse_bytes", "go_gc_gomemlimit_bytes",
	"eventgate_clickhouse_engine_memory_bytes", `eventgate_clickhouse_engine_memory_use_bytes{use="merges"}`,
	`eventgate_clickhouse_engine_memory_use_bytes{use="inserts"}`, `eventgate_clickhouse_engine_memory_use_bytes{use="reads"}`}

func watchPeak(ctx context.Context, g *Gateway) *peakWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &peakWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(peakEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, now, err := g.Memory()
			if err != nil {
				return
			}
			w.mu.Lock()
			w.top = max(w.top, now)
			higher, phase := now > w.at.rss+peakStep, w.phase
			w.mu.Unlock()
			if !higher {
				continue
			}
			s := peakSample{when: time.Now(), phase: phase, rss: now}
			v, err := g.MetricsFound(ctx, peakMetrics...)
			if err == nil {
				for i := range 4 {
					if math.IsNaN(v[i]) {
						err = fmt.Errorf("metric %s not exported", peakMetrics[i])
					}
				}
			}
			if err != nil {
				s.metricsErr = err
			} else {
				for i := range v {
					v[i] /= 1 << 20
				}
				s.outside, s.outsideHigh, s.heap, s.goLim = v[0], v[1], v[2], v[3]
				s.engine, s.merges, s.inserts, s.reads = v[4], v[5], v[6], v[7]
			}
			w.mu.Lock()
			if s.rss > w.at.rss {
				w.at = s
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// setPhase names the phase the following samples fall in.
func (w *peakWatch) setPhase(phase string) {
	w.mu.Lock()
	w.phase = phase
	w.mu.Unlock()
}

// highest is the highest sample so far.
func (w *peakWatch) highest() peakSample {
	if w == nil {
		return peakSample{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.at
	s.top = w.top
	return s
}

func (w *peakWatch) stop() {
	w.cancel()
	<-w.done
}

// String describes the sample for the log and the memory row's note.
func (s peakSample) String() string {
	if s.rss == 0 {
		return "no sample"
	}
	if s.metricsErr != nil {
		return fmt.Sprintf("highest sampled RSS %.0f MiB; at %.0f MiB in the %s phase (metrics: %v)", max(s.top, s.rss), s.rss, s.phase, s.metricsErr)
	}
	return fmt.Sprintf("highest sampled RSS %.0f MiB; at %.0f MiB, in the %s phase at %s: outside Go %.0f MiB (its recent high %.0f; the engine's tracker %.0f MiB, of it merges %.0f, inserts %.0f, reads %.0f), Go heap in use %.0f MiB, Go limit %.0f MiB",
		max(s.top, s.rss), s.rss, s.phase, s.when.UTC().Format("15:04:05"), s.outside, s.outsideHigh,
		s.engine, s.merges, s.inserts, s.reads, s.heap, s.goLim)
}
