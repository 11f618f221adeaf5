package console_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/natstest"
)

// TestTailReconnectsAfterDropAndRelistsOn410 restarts the gateway under an
// open live tail: the page reconnects by itself and resumes from its
// resourceVersion. Then, while the tail is paused, the stream is purged past
// that resourceVersion: on Resume the watch answers 410 Gone, and the page
// re-lists, showing what it missed once.
func TestTailReconnectsAfterDropAndRelistsOn410(t *testing.T) {
	dataDir := t.TempDir()
	ns := namespace("recon")
	natsAddr := freeAddr(t)
	withNATS := func(c *config.Config) { c.NATS.Listen = natsAddr }
	gw1, stop1, err := newGateway(dataDir, "", "127.0.0.1:0", withNATS)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = stop1()
		}
	})

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw1.url+"/ui/#/tail?namespace="+ns))
	waitText(t, ctx, "#tail-status", "Live", 15*time.Second)
	mustEmit(t, gw1.url, "", `{"events":[`+event("BeforeRestart", "Normal", ns, "web")+`]}`)
	waitText(t, ctx, "#tail-list", "BeforeRestart", 5*time.Second)

	// The stream drops: the page says so and retries with backoff.
	stopped = true
	if err := stop1(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	waitText(t, ctx, "#tail-status", "reconnecting", 10*time.Second)
	gw2 := startGatewayAt(t, dataDir, gw1, withNATS)
	waitText(t, ctx, "#tail-status", "Live (from resourceVersion", 20*time.Second)
	mustEmit(t, gw2.url, "", `{"events":[`+event("AfterRestart", "Normal", ns, "web")+`]}`)
	waitText(t, ctx, "#tail-list", "AfterRestart", 5*time.Second)

	// Paused, the tail keeps its resourceVersion; the stream then forgets
	// everything up to now.
	do(t, ctx, chromedp.Click(chromedp.CSS("#tail-pause")))
	waitText(t, ctx, "#tail-status", "Paused", 5*time.Second)
	mustEmit(t, gw2.url, "", `{"events":[`+event("WhilePaused", "Normal", ns, "web")+`]}`)
	waitQueryable(t, gw2.url, "", "/v1/events?namespace="+ns, "events", 3)
	purgeStream(t, natsAddr)
	mustEmit(t, gw2.url, "", `{"events":[`+event("AfterPurge", "Normal", ns, "web")+`]}`)
	waitQueryable(t, gw2.url, "", "/v1/events?namespace="+ns, "events", 4)

	do(t, ctx, chromedp.Click(chromedp.CSS("#tail-pause")))
	waitText(t, ctx, "#tail-status", "re-listed after 410 Gone", 15*time.Second)
	waitText(t, ctx, "#tail-list", "AfterPurge", 5*time.Second)
	for _, reason := range []string{"BeforeRestart", "AfterRestart", "WhilePaused", "AfterPurge"} {
		if n := shownRows(t, ctx, reason); n != 1 {
			t.Errorf("%s shows %d times after the re-list, want once:\n%s", reason, n, innerText(t, ctx, "#tail-list"))
		}
	}
}

// startGatewayAt starts a gateway on the data, database and HTTP address of
// a stopped one, stopped when t ends.
func startGatewayAt(t *testing.T, dataDir string, old *testGateway, mutate func(*config.Config)) *testGateway {
	t.Helper()
	gw, stop, err := newGateway(dataDir, old.db, strings.TrimPrefix(old.url, "http://"), mutate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return gw
}

// freeAddr is a loopback address no one listens on (for the embedded NATS
// server, which takes no port 0).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// purgeStream drops every message of the events stream, as its limits would
// in time: a watch from an earlier resourceVersion is then too old.
func purgeStream(t *testing.T, addr string) {
	t.Helper()
	nc, js := natstest.Connect(t, "nats://"+addr)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, config.Default().NATS.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(fmt.Errorf("purge: %w", err))
	}
}
