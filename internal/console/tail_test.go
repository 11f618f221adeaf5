package console_test

import (
	"fmt"
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
	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/tail"))
	waitText(t, ctx, "#tail-status", "Live", 15*time.Second)

	start := time.Now()
	mustEmit(t, gw.url, "", `{"events":[`+event("TailFirstSight", "Normal", "tail-1", "web")+`]}`)
	waitText(t, ctx, "#tail-list", "TailFirstSight", 5*time.Second)
	took := time.Since(start)
	t.Logf("emitted → shown in the live tail: %v", took)
	if took > time.Second {
		t.Errorf("the live tail showed the event after %v, want within a second", took)
	}
	shot(t, ctx, "tail")
}
