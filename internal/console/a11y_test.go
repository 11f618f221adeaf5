package console_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestEveryViewIsLabelledAndKeyboardUsable checks, on every view, that each
// form control has a label, and that a keyboard alone gets from the skip
// link to the views and runs a search with Enter, and that a change of view
// moves the focus to it.
func TestEveryViewIsLabelledAndKeyboardUsable(t *testing.T) {
	gw := shared(t)
	ctx := tab(t)
	for _, view := range []string{"tail", "search", "top", "series", "rules"} {
		do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/"+view))
		waitJS(t, ctx, view+" rendered", `!!document.querySelector('#main form')`, 10*time.Second)
		unlabelled := eval[[]string](t, ctx, `[...document.querySelectorAll('input, select, textarea')]
			.filter((el) => el.labels.length === 0 && !el.getAttribute('aria-label')).map((el) => el.id || el.name)`)
		if len(unlabelled) > 0 {
			t.Errorf("view %s: controls without a label: %q", view, unlabelled)
		}
	}

	// Moving to another view puts the focus on it.
	if got := eval[string](t, ctx, `document.activeElement.id`); got != "main" {
		t.Errorf("after a change of view the focus is on %q, want the view (main)", got)
	}

	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search"), chromedp.Reload())
	waitJS(t, ctx, "the search form", `!!document.getElementById('f-reason')`, 10*time.Second)
	do(t, ctx, chromedp.KeyEvent(kb.Tab))
	if got := eval[string](t, ctx, `document.activeElement.innerText`); got != "Skip to content" {
		t.Errorf("the first Tab focuses %q, want the skip link", got)
	}
	do(t, ctx, chromedp.KeyEvent(kb.Tab))
	if got := eval[string](t, ctx, `document.activeElement.innerText`); got != "Live tail" {
		t.Errorf("the second Tab focuses %q, want the first view", got)
	}
	do(t, ctx, chromedp.Focus(chromedp.CSS("#f-reason")), chromedp.KeyEvent("KeyboardOnly"), chromedp.KeyEvent(kb.Enter))
	waitJS(t, ctx, "the search submitted with Enter", `location.hash.includes('reason=KeyboardOnly')`, 5*time.Second)
}

// TestConsoleFitsAPhone opens the search and the live tail at a phone's
// width: the page does not scroll sideways (wide tables scroll in their own
// box) and the tail keeps its time, reason and object columns.
func TestConsoleFitsAPhone(t *testing.T) {
	gw := shared(t)
	ns := namespace("phone")
	mustEmit(t, gw.url, "", `{"events":[`+event("PhoneSized", "Normal", ns, "web")+`]}`)
	waitQueryable(t, gw.url, "", "/v1/events?namespace="+ns, "events", 1)
	ctx := tab(t)
	do(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search?namespace="+ns))
	waitText(t, ctx, "#results-table", "PhoneSized", 10*time.Second)
	waitJS(t, ctx, "the histogram", `!!document.querySelector('#histogram .u-over')`, 10*time.Second)
	if w := eval[[]int](t, ctx, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
		t.Errorf("the search page is %d px wide on a %d px phone", w[0], w[1])
	}
	shot(t, ctx, "phone-search")

	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/tail?namespace="+ns))
	waitText(t, ctx, "#tail-list", "PhoneSized", 10*time.Second)
	if w := eval[[]int](t, ctx, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
		t.Errorf("the tail is %d px wide on a %d px phone", w[0], w[1])
	}
	if vis := eval[[]string](t, ctx, `[...document.querySelector('#tail-list .tail-row:not([hidden])').children].filter((c) => c.offsetWidth > 0).map((c) => c.className)`); len(vis) != 3 {
		t.Errorf("a tail row on a phone shows %q, want time, reason and object", vis)
	}
}
