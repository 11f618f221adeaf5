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
	phase  string
	cancel context.CancelFunc
	done   chan struct{}
}

// peakSample is one reading, in MiB.
type peakSample struct {
	when                                   time.Time
	phase                                  string
	rss, outside, outsideHigh, heap, goLim float64
	metricsErr                             error
}

const peakEvery = 250 * time.Millisecond

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
			higher, phase := now > w.at.rss, w.phase
			w.mu.Unlock()
			if !higher {
				continue
			}
			s := peakSample{when: time.Now(), phase: phase, rss: now}
			mib := func(name string) float64 {
				v, err := g.Metric(ctx, name)
				if err != nil && s.metricsErr == nil {
					s.metricsErr = err
				}
				return v / (1 << 20)
			}
			s.outside, s.outsideHigh = mib("eventgate_memory_outside_go_bytes"), mib("eventgate_memory_outside_go_high_bytes")
			s.heap, s.goLim = mib("go_memstats_heap_inuse_bytes"), mib("go_gc_gomemlimit_bytes")
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
	return w.at
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
		return fmt.Sprintf("highest sampled RSS %.0f MiB in the %s phase (metrics: %v)", s.rss, s.phase, s.metricsErr)
	}
	return fmt.Sprintf("highest sampled RSS %.0f MiB in the %s phase at %s: outside Go %.0f MiB (its recent high %.0f), Go heap in use %.0f MiB, Go limit %.0f MiB",
		s.rss, s.phase, s.when.UTC().Format("15:04:05"), s.outside, s.outsideHigh, s.heap, s.goLim)
}
