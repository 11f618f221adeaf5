package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// waitQueryable polls the REST API until path?query answers with at least
// n items in field ("events", "entries"), so that a page opened next finds
// them in ClickHouse (on a loaded machine under the race detector, the
// ingest can trail by many seconds); it returns the answer.
func waitQueryable(t *testing.T, base, token, pathQuery, field string, n int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, base+pathQuery, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v %v", pathQuery, resp.StatusCode, m, err)
		}
		if items, _ := m[field].([]any); len(items) >= n {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: fewer than %d %s after 45s: %v", pathQuery, n, field, m)
		}
		time.Sleep(50 * time.Millisecond) // polling the store for the ingest to catch up
	}
}

// tableColumn is the text of one column of the table sel, row by row.
func tableColumn(t *testing.T, ctx context.Context, sel string, col int) []string {
	t.Helper()
	return eval[[]string](t, ctx, fmt.Sprintf(`[...document.querySelectorAll(%q)].map((tr) => tr.cells[%d].innerText)`, sel+" tbody tr", col))
}

// TestSearchFindsEventsByReasonAndByFieldSelector fills the search form as a
// person would: a reason, then a field selector; the results table shows the
// matching events only, and a reload of the URL shows them again.
func TestSearchFindsEventsByReasonAndByFieldSelector(t *testing.T) {
	gw := shared(t)
	ns := namespace("search")
	mustEmit(t, gw.url, "", `{"events":[`+event("SearchAlpha", "Warning", ns, "api")+`,`+
		event("SearchBeta", "Normal", ns, "api")+`,`+event("SearchGamma", "Normal", ns, "db")+`,`+
		event("SearchAlpha", "Warning", "search-elsewhere", "api")+`]}`)
	waitQueryable(t, gw.url, "", "/v1/events?namespace="+ns, "events", 3)

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search"),
		chromedp.SendKeys(chromedp.CSS("#f-namespace"), ns),
		chromedp.SendKeys(chromedp.CSS("#f-reason"), "SearchAlpha"),
		chromedp.Click(chromedp.CSS("#main button[type=submit]")))
	waitJS(t, ctx, "the query in the URL", `location.hash.includes('reason=SearchAlpha') && location.hash.includes('namespace=`+ns+`')`, 5*time.Second)
	waitText(t, ctx, "#results-count", "1 events", 10*time.Second)
	if got := tableColumn(t, ctx, "#results-table", 3); len(got) != 1 || got[0] != "SearchAlpha" {
		t.Errorf("search by reason shows reasons %q, want [SearchAlpha]", got)
	}

	// The URL holds the query: a reload shows the same result.
	do(t, ctx, chromedp.Reload())
	waitText(t, ctx, "#results-count", "1 events", 10*time.Second)
	if v := eval[string](t, ctx, `document.getElementById('f-reason').value`); v != "SearchAlpha" {
		t.Errorf("after a reload the reason field holds %q", v)
	}

	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search"),
		chromedp.SendKeys(chromedp.CSS("#f-fieldSelector"), "reason in (SearchBeta,SearchGamma,SearchAlpha),type!=Warning,namespace="+ns),
		chromedp.Click(chromedp.CSS("#main button[type=submit]")))
	waitText(t, ctx, "#results-count", "2 events", 10*time.Second)
	got := strings.Join(tableColumn(t, ctx, "#results-table", 3), ",")
	if got != "SearchGamma,SearchBeta" && got != "SearchBeta,SearchGamma" {
		t.Errorf("search by fieldSelector shows reasons %q, want SearchBeta and SearchGamma", got)
	}

	// Keyset pages: two, then the last one, then back.
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search?namespace="+ns+"&pageSize=2"))
	waitText(t, ctx, "#results-count", "2 events", 30*time.Second)
	waitSearchSettled(t, ctx)
	first := tableColumn(t, ctx, "#results-table", 3)
	do(t, ctx, chromedp.Click(chromedp.CSS("#next-page")))
	waitText(t, ctx, "#results-count", "1 events", 30*time.Second)
	waitSearchSettled(t, ctx)
	last := tableColumn(t, ctx, "#results-table", 3)
	if all := strings.Join(append(first, last...), ","); strings.Count(all, "Search") != 3 || strings.Count(all, "SearchAlpha") != 1 || strings.Count(all, "SearchBeta") != 1 {
		t.Errorf("the pages list %q, want each of the three events once", all)
	}
	do(t, ctx, chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('#results button')].find((b) => b.innerText === 'Previous page')`)))
	waitText(t, ctx, "#results-count", "2 events", 30*time.Second)
	if back := tableColumn(t, ctx, "#results-table", 3); strings.Join(back, ",") != strings.Join(first, ",") {
		t.Errorf("Previous page lists %q, want the first page %q", back, first)
	}

	// A selector the API refuses shows its error as the API states it.
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search?fieldSelector=color%3Dblue"))
	waitText(t, ctx, "#error", "400 Bad Request", 10*time.Second)
}

// TestHistogramBarsAddUpToQueryCount checks that the histogram's bars (its
// table of counts) add up to the events the query lists, that a facet is a
// one-click filter, and that dragging across the chart sets the search's
// time range.
func TestHistogramBarsAddUpToQueryCount(t *testing.T) {
	gw := shared(t)
	ns := namespace("hist")
	// Spread over the last 45 minutes, so the bars fall in several buckets.
	var evs []string
	now := time.Now()
	for i := range 7 {
		typ := "Normal"
		if i%3 == 0 {
			typ = "Warning"
		}
		evs = append(evs, fmt.Sprintf(`{"reason":"Hist%d","type":%q,"note":"n","reportingController":"example.com/console-test","eventTime":%q,"regarding":{"kind":"Deployment","namespace":"`+ns+`","name":"app-%d"}}`,
			i, typ, now.Add(-time.Duration(i)*7*time.Minute).UTC().Format(time.RFC3339Nano), i))
	}
	mustEmit(t, gw.url, "", `{"events":[`+strings.Join(evs, ",")+`]}`)
	waitQueryable(t, gw.url, "", "/v1/events?namespace="+ns, "events", 7)

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search?namespace="+ns+"&range=1h"))
	waitJS(t, ctx, "the histogram's table", `!!document.querySelector('#histogram-table tbody tr')`, 10*time.Second)
	waitJS(t, ctx, "the results", `!!document.getElementById('results-count')`, 10*time.Second)
	waitJS(t, ctx, "the facets", `!!document.querySelector('#facets button.facet')`, 10*time.Second)
	shot(t, ctx, "histogram")
	// Open the table, as a reader who wants the numbers would.
	do(t, ctx, chromedp.Click(chromedp.CSS("#main details.data-details summary")))
	bars := eval[int](t, ctx, `[...document.querySelectorAll('#histogram-table tbody td')].reduce((s, td) => s + Number(td.innerText), 0)`)
	listed := eval[string](t, ctx, `document.getElementById('results-count').dataset.occurrences`)
	if fmt.Sprint(bars) != listed || bars != 7 {
		t.Errorf("histogram bars add up to %d, the query lists %s occurrences; want both 7", bars, listed)
	}
	if got := innerText(t, ctx, "#histogram-total"); !strings.HasPrefix(got, "7 occurrences") {
		t.Errorf("histogram total says %q", got)
	}
	if got := eval[int](t, ctx, `document.querySelectorAll('#histogram .u-legend th').length`); got < 2 {
		t.Errorf("the chart's legend has %d series, want Normal and Warning stacked", got)
	}

	// A facet value filters the search.
	do(t, ctx, chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('#facets button.facet')].find((b) => b.innerText.startsWith('Warning'))`)))
	waitJS(t, ctx, "the facet in the URL", `location.hash.includes('type=Warning')`, 5*time.Second)
	waitText(t, ctx, "#results-count", "3 events", 10*time.Second)
	if got := tableColumn(t, ctx, "#results-table", 2); strings.Join(got, ",") != "Warning,Warning,Warning" {
		t.Errorf("after the Warning facet the types are %q", got)
	}

	// Brush: drag across the middle of the plot.
	waitJS(t, ctx, "the chart", `!!document.querySelector('#histogram .u-over')`, 10*time.Second)
	box := eval[[]float64](t, ctx, `(() => { const r = document.querySelector('#histogram .u-over').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`)
	x0, x1, y := box[0]+box[2]*0.2, box[0]+box[2]*0.8, box[1]+box[3]/2
	do(t, ctx,
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x0, y),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, x0, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, (x0+x1)/2, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x1, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, x1, y, chromedp.ButtonLeft))
	waitJS(t, ctx, "the brushed range in the URL", `location.hash.includes('since=') && location.hash.includes('until=') && !location.hash.includes('range=')`, 5*time.Second)
	waitJS(t, ctx, "the time range picker on the brushed range", `document.getElementById('f-range').value === 'custom' && document.getElementById('f-since').value !== ''`, 5*time.Second)
}

// waitSearchSettled waits until the search view's histogram and facets
// have rendered, as a user sees the page before clicking in it.
func waitSearchSettled(t *testing.T, ctx context.Context) {
	t.Helper()
	waitJS(t, ctx, "the histogram and the facets", `document.getElementById('histogram-total').dataset.total !== undefined && document.querySelectorAll('#facets .facet-group').length > 0`, 30*time.Second)
}
