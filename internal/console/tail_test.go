package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func event(reason, typ, ns, name string) string {
	return fmt.Sprintf(`{"reason":%q,"type":%q,"note":"%s on %s","reportingController":"example.com/console-test","regarding":{"apiVersion":"apps/v1","kind":"Deployment","namespace":%q,"name":%q}}`, reason, typ, reason, name, ns, name)
}

// TestTailShowsEventEmittedByCurlWithinASecond opens the live tail, emits an
// event over REST and measures how long until the page shows it.
func TestTailShowsEventEmittedByCurlWithinASecond(t *testing.T) {
	gw := shared(t)
	ns := namespace("tail")
	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/tail?namespace="+ns))
	waitText(t, ctx, "#tail-status", "Live", 15*time.Second)

	start := time.Now()
	mustEmit(t, gw.url, "", `{"events":[`+event("TailFirstSight", "Normal", ns, "web")+`]}`)
	waitText(t, ctx, "#tail-list", "TailFirstSight", 5*time.Second)
	took := time.Since(start)
	t.Logf("emitted → shown in the live tail: %v", took)
	if took > time.Second {
		t.Errorf("the live tail showed the event after %v, want within a second", took)
	}
}

// TestTailFilterNarrowsToMatchingEvents types a reason into the tail's
// filter and checks that of two events emitted in one batch, the page
// shows only the matching one.
func TestTailFilterNarrowsToMatchingEvents(t *testing.T) {
	gw := shared(t)
	ns := namespace("tail")
	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/tail"))
	waitText(t, ctx, "#tail-status", "Live", 15*time.Second)
	do(t, ctx,
		chromedp.SendKeys(chromedp.CSS("#f-reason"), "TailKept"),
		chromedp.SendKeys(chromedp.CSS("#f-namespace"), ns),
		chromedp.Click(chromedp.CSS("#main button[type=submit]")),
	)
	waitJS(t, ctx, "the filter in the URL", `location.hash.includes('reason=TailKept')`, 5*time.Second)
	waitText(t, ctx, "#tail-status", "Live", 15*time.Second)

	// One batch, in order: the dropped event is on the stream before the
	// kept one, so once the kept one shows, the dropped one had its chance.
	mustEmit(t, gw.url, "", `{"events":[`+event("TailDropped", "Normal", ns, "web")+`,`+event("TailKept", "Warning", ns, "web")+`,`+event("TailKept", "Warning", "tail-other", "web")+`]}`)
	waitText(t, ctx, "#tail-list", "TailKept", 5*time.Second)
	list := innerText(t, ctx, "#tail-list")
	if strings.Contains(list, "TailDropped") || strings.Contains(list, "tail-other") {
		t.Errorf("the filtered tail shows events it filters out:\n%s", list)
	}
	if got := innerText(t, ctx, "#tail-count"); !strings.HasPrefix(got, "1 received") {
		t.Errorf("received counter %q, want 1", got)
	}
}

// TestTailResumesFromLastResourceVersionAfterPause pauses the tail, emits
// while it is paused, and checks that Resume shows what was missed, from
// the resourceVersion the pause kept.
func TestTailResumesFromLastResourceVersionAfterPause(t *testing.T) {
	gw := shared(t)
	ns := namespace("tail")
	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/tail?namespace="+ns))
	waitText(t, ctx, "#tail-status", "Live", 15*time.Second)
	mustEmit(t, gw.url, "", `{"events":[`+event("BeforePause", "Normal", ns, "web")+`]}`)
	waitText(t, ctx, "#tail-list", "BeforePause", 5*time.Second)

	do(t, ctx, chromedp.Click(chromedp.CSS("#tail-pause")))
	waitText(t, ctx, "#tail-status", "Paused at resourceVersion", 5*time.Second)
	if got := innerText(t, ctx, "#tail-pause"); got != "Resume" {
		t.Errorf("pause button says %q while paused, want Resume", got)
	}
	mustEmit(t, gw.url, "", `{"events":[`+event("DuringPause", "Normal", ns, "web")+`]}`)
	do(t, ctx, chromedp.Click(chromedp.CSS("#tail-pause")))
	waitText(t, ctx, "#tail-status", "Live (from resourceVersion", 10*time.Second)
	waitText(t, ctx, "#tail-list", "DuringPause", 5*time.Second)
	if got := shownRows(t, ctx, "BeforePause"); got != 1 {
		t.Errorf("after resuming, the event before the pause shows %d times, want once:\n%s\n%s", got, innerText(t, ctx, "#tail-status"), innerText(t, ctx, "#tail-list"))
	}
}

// shownRows counts the live tail's rows showing reason.
func shownRows(t *testing.T, ctx context.Context, reason string) int {
	t.Helper()
	return eval[int](t, ctx, fmt.Sprintf(`[...document.querySelectorAll('#tail-list .tail-row:not([hidden]) .c-reason')].filter((a) => a.textContent === %q).length`, reason))
}
