package console_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func eventAt(reason, ns, name string, at time.Time) string {
	return fmt.Sprintf(`{"reason":%q,"type":"Normal","note":"n","reportingController":"example.com/console-test","eventTime":%q,"regarding":{"kind":"Deployment","namespace":%q,"name":%q}}`,
		reason, at.UTC().Format(time.RFC3339Nano), ns, name)
}

// TestTopShowsTrendAgainstPreviousWindow stores events in the last 15
// minutes and in the 15 before, and checks that Top lists the reasons by
// count with their change against the previous window.
func TestTopShowsTrendAgainstPreviousWindow(t *testing.T) {
	gw := shared(t)
	ns := namespace("top")
	now := time.Now()
	before := now.Add(-20 * time.Minute)
	evs := []string{
		eventAt("TopRising", ns, "a", now), eventAt("TopRising", ns, "b", now), eventAt("TopRising", ns, "c", now),
		eventAt("TopFalling", ns, "d", now),
		eventAt("TopRising", ns, "e", before),
		eventAt("TopFalling", ns, "f", before), eventAt("TopFalling", ns, "g", before),
	}
	mustEmit(t, gw.url, "", `{"events":[`+strings.Join(evs, ",")+`]}`)
	waitQueryable(t, gw.url, "", "/v1/events?namespace="+ns, "events", len(evs))

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/top?namespace="+ns+"&range=15m&dimension=reason"))
	waitJS(t, ctx, "the top table", `!!document.querySelector('#top-table tbody tr')`, 10*time.Second)
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll('#top-table tbody tr')].map((tr) => [...tr.cells].map((c) => c.innerText.trim()).join('|'))`)
	want := []string{"TopRising|3|75.0%|1|▲ +200%", "TopFalling|1|25.0%|2|▼ -50%"}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("Top shows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	shot(t, ctx, "top")
}

// TestSeriesViewShowsOccurrencesPerMinute folds four occurrences into a
// series and checks the Series view: its row with the count, and the
// per-minute chart whose numbers add up to it.
func TestSeriesViewShowsOccurrencesPerMinute(t *testing.T) {
	gw := shared(t)
	ns := namespace("series")
	ev := event("SeriesBackOff", "Warning", ns, "worker")
	for range 4 {
		mustEmit(t, gw.url, "", `{"events":[`+ev+`]}`)
	}
	waitSeries(t, gw.url, ns, "SeriesBackOff", 4)

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/series?namespace="+ns+"&range=1h"))
	waitJS(t, ctx, "the series table", `!!document.querySelector('#series-table tbody tr')`, 10*time.Second)
	row := eval[[]string](t, ctx, `[...document.querySelector('#series-table tbody tr').cells].map((c) => c.innerText.trim())`)
	if row[0] != "SeriesBackOff" || row[4] != "4" || row[7] != "Ongoing" {
		t.Errorf("the series row is %q, want SeriesBackOff with count 4, Ongoing", row)
	}
	waitJS(t, ctx, "the per-minute chart", `!!document.querySelector('#minutes .u-over')`, 10*time.Second)
	do(t, ctx, chromedp.Click(chromedp.CSS("#main details.data-details summary")))
	sum := eval[int](t, ctx, `[...document.querySelectorAll('#minutes-table tbody td')].reduce((s, td) => s + Number(td.innerText), 0)`)
	if sum != 4 {
		t.Errorf("the per-minute occurrences add up to %d, want 4", sum)
	}
	shot(t, ctx, "series")
}
