package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRulesApplyListGetAndDeliveries: a rule applied from YAML on stdin
// notifies a webhook; list, get and deliveries show it, never its secret.
func TestRulesApplyListGetAndDeliveries(t *testing.T) {
	dataDir, grpcAddr, httpAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	startGateway(t, dataDir, grpcAddr, httpAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hooks := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks <- r.Header.Get("Eventgate-Id")
	}))
	defer srv.Close()
	env := map[string]string{"EVENTGATE_SERVER": grpcAddr, "EVENTGATE_TENANT": "project/shop"}
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut, func(k string) string { return env[k] })
	root.SetIn(strings.NewReader(`name: jobs-failed
fieldSelector: reason=Failed
condition:
  every: {}
destination:
  webhook:
    url: ` + srv.URL + `
    secret: cli-secret-0123456789
`))
	root.SetArgs([]string{"rules", "apply", "-f", "-"})
	if err := root.ExecuteContext(ctx); err != nil || out.String() != "rule/jobs-failed created\n" {
		t.Fatalf("rules apply: %q %v\n%s", out.String(), err, errOut.String())
	}
	if tbl := mustCLI(t, ctx, env, "rules", "list"); !strings.Contains(tbl, "jobs-failed") || !strings.Contains(tbl, "webhook "+srv.URL) {
		t.Errorf("rules list:\n%s", tbl)
	}
	if y := mustCLI(t, ctx, env, "rules", "get", "jobs-failed"); strings.Contains(y, "cli-secret") || !strings.Contains(y, "secretSet: true") {
		t.Errorf("rules get shows:\n%s", y)
	}
	// Emitted until one is notified: the rule reaches evaluation through
	// the gateway's KV watch.
	var id string
	for try := 0; id == ""; try++ {
		emitOut, errOut, err := cli(t, ctx, env, "emit", "--reason", "Failed", "--type", "Warning", "--action", "Run",
			"--regarding", "Job/backup", "--note", fmt.Sprintf("exit %d", try))
		if err != nil {
			t.Fatalf("emit: %v %s %s", err, emitOut, errOut)
		}
		select {
		case id = <-hooks:
		case <-time.After(time.Second):
		case <-ctx.Done():
			t.Fatal("no notification")
		}
	}
	for {
		tbl := mustCLI(t, ctx, env, "rules", "deliveries", "jobs-failed")
		if strings.Contains(tbl, id) && strings.Contains(tbl, "delivered") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("rules deliveries:\n%s", tbl)
		}
		time.Sleep(50 * time.Millisecond) // polling the delivery log
	}
	if out := mustCLI(t, ctx, env, "rules", "delete", "jobs-failed"); out != "rule/jobs-failed deleted\n" {
		t.Errorf("rules delete: %q", out)
	}
}
