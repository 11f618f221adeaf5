package console_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestTimelineOfObjectShowsItsSeries emits a repeated event (folded into a
// series), another event about the same pod and one that names it as the
// related object; from the search, one click opens an event's detail and
// one more the pod's timeline, which shows the series as a span of three
// occurrences and the related event.
func TestTimelineOfObjectShowsItsSeries(t *testing.T) {
	gw := shared(t)
	ns := namespace("timeline")
	pod := `{"apiVersion":"v1","kind":"Pod","namespace":"` + ns + `","name":"api-0"}`
	// Spread over the last ten minutes, so that the spans have a length.
	now := time.Now()
	at := func(ago time.Duration) string { return now.Add(-ago).UTC().Format(time.RFC3339Nano) }
	mustEmit(t, gw.url, "", `{"events":[`+
		`{"reason":"TimelineScheduled","type":"Normal","note":"assigned to node-1","reportingController":"scheduler","regarding":`+pod+`,`+
		`"eventTime":"`+at(10*time.Minute)+`","labels":{"app":"api"},"annotations":{"team":"payments"}}]}`)
	for _, ago := range []time.Duration{8 * time.Minute, 5 * time.Minute, 2 * time.Minute} {
		mustEmit(t, gw.url, "", `{"events":[{"reason":"TimelineBackOff","type":"Warning","note":"back-off restarting","reportingController":"kubelet",`+
			`"eventTime":"`+at(ago)+`","regarding":`+pod+`}]}`)
	}
	mustEmit(t, gw.url, "", `{"events":[{"reason":"TimelineEvicted","type":"Warning","note":"node pressure","reportingController":"kubelet",`+
		`"eventTime":"`+at(time.Minute)+`","regarding":{"kind":"Node","name":"node-1"},"related":`+pod+`}]}`)
	waitQueryable(t, gw.url, "", "/v1/analytics/timeline?involving.kind=Pod&involving.namespace="+ns+"&involving.name=api-0", "entries", 3)
	waitSeries(t, gw.url, ns, "TimelineBackOff", 3)

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search?namespace="+ns+"&reason=TimelineScheduled"))
	waitText(t, ctx, "#results-table", "TimelineScheduled", 10*time.Second)
	do(t, ctx, chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('#results-table a')].find((a) => a.innerText === 'TimelineScheduled')`)))
	waitText(t, ctx, "#event-detail", "assigned to node-1", 10*time.Second)
	detail := innerText(t, ctx, "#event-detail")
	for _, want := range []string{"app = api", "team = payments", "scheduler", "Pod", "none (a single occurrence)"} {
		if !strings.Contains(detail, want) {
			t.Errorf("the event detail lacks %q:\n%s", want, detail)
		}
	}

	do(t, ctx, chromedp.Click(chromedp.CSS("#timeline-link")))
	waitText(t, ctx, "#timeline", "TimelineBackOff", 10*time.Second)
	entries := eval[[]string](t, ctx, `[...document.querySelectorAll('#timeline .tl-entry')].map((li) => li.innerText.replace(/\s+/g, ' '))`)
	var series, related bool
	for _, e := range entries {
		series = series || (strings.Contains(e, "TimelineBackOff") && strings.Contains(e, "series ×3"))
		related = related || (strings.Contains(e, "TimelineEvicted") && strings.Contains(e, "related"))
	}
	if !series || !related || len(entries) != 3 {
		t.Errorf("the timeline shows %d entries %q; want the BackOff series ×3, the Scheduled event and the related eviction", len(entries), entries)
	}
	spans := eval[int](t, ctx, `document.querySelectorAll('#timeline .tl-track .span.series').length`)
	if spans != 1 {
		t.Errorf("the timeline draws %d series spans, want 1", spans)
	}
	shot(t, ctx, "timeline")
}

// waitSeries waits until the stored series of reason in ns has count
// occurrences.
func waitSeries(t *testing.T, base, ns, reason string, count int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := waitQueryable(t, base, "", "/v1/events?namespace="+ns+"&reason="+reason, "events", 1)
		ev := m["events"].([]any)[0].(map[string]any)
		if s, ok := ev["series"].(map[string]any); ok && fmt.Sprint(s["count"]) == fmt.Sprint(count) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s series did not reach %d occurrences: %v", reason, count, ev)
		}
		time.Sleep(50 * time.Millisecond) // polling the store for the series to be written
	}
}
