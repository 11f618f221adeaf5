package console_test

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestTailStaysResponsiveAt2000EventsPerSecond pauses an open live tail,
// stores a backlog of events, and resumes: the watch replays the backlog
// from the paused resourceVersion as fast as the gateway sends it (well over
// 2,000 events/s). Meanwhile the page measures the time between its
// animation frames, and the test how long a click on Pause takes to show.
// They are asserted loosely (the race detector and a shared CI machine slow
// everything), the DOM must stay bounded, and the numbers are logged.
func TestTailStaysResponsiveAt2000EventsPerSecond(t *testing.T) {
	const (
		total = 3000
		batch = 1000
	)
	// A gateway of its own, so the backlog does not slow the others, with
	// the ingest behind the watch as in production (the default nice).
	gw := startGateway(t, func(c *config.Config) { c.ClickHouse.IngestNice = config.Default().ClickHouse.IngestNice })
	ctx := tab(t)
	ns := namespace("burst")
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/tail?namespace="+ns))
	waitText(t, ctx, "#tail-status", "Live", 15*time.Second)
	do(t, ctx, chromedp.Click(chromedp.CSS("#tail-pause")))
	waitText(t, ctx, "#tail-status", "Paused", 5*time.Second)

	// Every event about an object of its own: none folds into a series, so
	// the watch replays exactly total events.
	var wg sync.WaitGroup
	for b := range total / batch {
		var events []string
		for i := range batch {
			events = append(events, event("BurstTick", "Normal", ns, fmt.Sprintf("app-%d-%d", b, i)))
		}
		body := `{"events":[` + strings.Join(events, ",") + `]}`
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustEmit(t, gw.url, "", body)
		}()
	}
	wg.Wait()

	// Frame times, recorded by the page itself, from the resume on.
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`window.frameGaps = []; window.frameRun = true; window.longTasks = 0; (() => {
		new PerformanceObserver((l) => { for (const e of l.getEntries()) window.longTasks += e.duration; }).observe({type: 'longtask'});
		let last = performance.now();
		const tick = (now) => { window.frameGaps.push(now - last); last = now; if (window.frameRun) requestAnimationFrame(tick); };
		requestAnimationFrame(tick);
	})()`))
	start := time.Now()
	do(t, ctx, chromedp.Click(chromedp.CSS("#tail-pause")))
	waitJS(t, ctx, "the backlog in the page", fmt.Sprintf(`Number(document.getElementById('tail-count').innerText.split(' ')[0]) >= %d`, total), 30*time.Second)
	took := time.Since(start)

	// Input latency under load: click Pause, wait for the page to say so.
	clickAt := time.Now()
	do(t, ctx, chromedp.Click(chromedp.CSS("#tail-pause")))
	waitText(t, ctx, "#tail-status", "Paused", 5*time.Second)
	clickLatency := time.Since(clickAt)

	gaps := eval[[]float64](t, ctx, `window.frameRun = false, window.frameGaps`)
	longTasks := eval[float64](t, ctx, `window.longTasks`)
	received := eval[int](t, ctx, `Number(document.getElementById('tail-count').innerText.split(' ')[0])`)
	rows := eval[int](t, ctx, `document.querySelectorAll('#tail-list .tail-row').length`)
	sort.Float64s(gaps)
	if len(gaps) < 3 {
		t.Fatalf("only %d frames while the page received %d events", len(gaps), received)
	}
	p50, p95, worst := gaps[len(gaps)/2], gaps[len(gaps)*95/100], gaps[len(gaps)-1]
	t.Logf("replay: %d events in %v (%.0f events/s), %d received at the pause; %d frames: p50 %.1f ms, p95 %.1f ms, worst %.1f ms; main thread in long tasks %.0f ms; Pause shown %v after the click; %d row elements",
		total, took.Round(time.Millisecond), float64(total)/took.Seconds(), received, len(gaps), p50, p95, worst, longTasks, clickLatency.Round(time.Millisecond), rows)
	if p95 > 500 || worst > 2000 {
		t.Errorf("the page janked under the burst: p95 frame gap %.0f ms, worst %.0f ms", p95, worst)
	}
	if clickLatency > 2*time.Second {
		t.Errorf("Pause took %v to show under the burst", clickLatency)
	}
	if rows > 100 {
		t.Errorf("the live tail holds %d row elements: the list is not virtualized", rows)
	}
	shot(t, ctx, "tail")
}
