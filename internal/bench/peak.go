package bench

import (
	"context"
	"fmt"
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
	top                                    float64 // the highest sample (highest only)
	metricsErr                             error
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
			v, err := g.Metrics(ctx, "eventgate_memory_outside_go_bytes", "eventgate_memory_outside_go_high_bytes",
				"go_memstats_heap_inuse_bytes", "go_gc_gomemlimit_bytes")
			if err != nil {
				s.metricsErr = err
			} else {
				s.outside, s.outsideHigh, s.heap, s.goLim = v[0]/(1<<20), v[1]/(1<<20), v[2]/(1<<20), v[3]/(1<<20)
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
	return fmt.Sprintf("highest sampled RSS %.0f MiB; at %.0f MiB, in the %s phase at %s: outside Go %.0f MiB (its recent high %.0f), Go heap in use %.0f MiB, Go limit %.0f MiB",
		max(s.top, s.rss), s.rss, s.phase, s.when.UTC().Format("15:04:05"), s.outside, s.outsideHigh, s.heap, s.goLim)
}
