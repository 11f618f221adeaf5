package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestRulesViewShowsRulesAndTheirDeliveries creates a rule that notifies a
// webhook, emits until it has notified, and opens the rules view of the
// tenant: it lists the rule, never its secret, and the rule's deliveries.
func TestRulesViewShowsRulesAndTheirDeliveries(t *testing.T) {
	gw := shared(t)
	tenant := namespace("rules")
	hooks := make(chan string, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks <- r.Header.Get("Eventgate-Id")
	}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, gw.url+"/v1/rules", strings.NewReader(`{"name":"failed-jobs",
		"tenant":{"type":"project","name":"`+tenant+`"},"fieldSelector":"reason=Failed",
		"condition":{"every":{}},"destination":{"webhook":{"url":"`+srv.URL+`","secret":"console-secret-0123456789"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create rule: %d %s", resp.StatusCode, b)
	}
	// Emitted until notified: the rule reaches evaluation through the KV watch.
	var id string
	for try := 0; id == ""; try++ {
		mustEmit(t, gw.url, "", fmt.Sprintf(`{"tenant":{"type":"project","name":"%s"},"events":[{"reason":"Failed","type":"Warning",`+
			`"note":"exit %d","reportingController":"cron","action":"Run","regarding":{"apiVersion":"batch/v1","kind":"Job","namespace":"ops","name":"backup"}}]}`, tenant, try))
		select {
		case id = <-hooks:
		case <-time.After(time.Second):
		}
		if try == 20 {
			t.Fatal("the rule never notified")
		}
	}

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/rules?tenant=project/"+tenant+"&rule=failed-jobs"))
	waitText(t, ctx, "#rules-table", "failed-jobs", 10*time.Second)
	rules := innerText(t, ctx, "#rules-table")
	if !strings.Contains(rules, "webhook "+srv.URL) || !strings.Contains(rules, "every event") || strings.Contains(rules, "console-secret") {
		t.Errorf("the rules table shows:\n%s", rules)
	}
	waitText(t, ctx, "#deliveries-table", id, 10*time.Second)
	waitText(t, ctx, "#deliveries-table", "delivered", 10*time.Second)
	shot(t, ctx, "rules")
}
