package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/ingest"
)

func getReadyz(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReplicaIDKeptInDataDir: without --replica-id a replica generates an
// id once, keeps it in its data directory and shows it on /readyz and
// /metrics, with its store filled from its live feed; a restart on the
// same directory is the same replica.
func TestReplicaIDKeptInDataDir(t *testing.T) {
	dir := t.TempDir()
	g := startGatewayIn(t, dir)
	b, err := os.ReadFile(filepath.Join(dir, "replica-id"))
	if err != nil {
		g.stop()
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(b))
	code, body := getReadyz(t, g.httpURL)
	metrics := metricsText(t, g.httpURL)
	g.stop()
	if code != http.StatusOK {
		t.Fatalf("/readyz %d: %v", code, body)
	}
	rep, _ := body["replica"].(map[string]any)
	if rep["id"] != id || rep["store"] != id || rep["ownStore"] != true || rep["ingestConsumer"] != ingest.FeedConsumer {
		t.Fatalf("/readyz replica %v, want id and store %q, own store, ingest %q", rep, id, ingest.FeedConsumer)
	}
	want := `eventgate_replica_info{consumer="` + ingest.FeedConsumer + `",replica="` + id + `",store="` + id + `",topology="own-store"} 1`
	if !strings.Contains(metrics, want) {
		t.Fatalf("/metrics lacks %s", want)
	}

	g = startGatewayIn(t, dir)
	defer g.stop()
	if g.replica.ID != id {
		t.Fatalf("restarted on the same data directory as %q, was %q", g.replica.ID, id)
	}
}

// TestReplicaIDFlagNamesTheReplicasConsumers: --replica-id names the
// replica and what it keeps on the server (its live feed); the store id
// stays the data directory's, and the store, filled from the live feed,
// leaves no consumer of its own there.
func TestReplicaIDFlagNamesTheReplicasConsumers(t *testing.T) {
	g := startGateway(t, func(c *config.Config) { c.ReplicaID = "eventgate-0" })
	if g.replica.ID != "eventgate-0" || g.replica.Consumer != ingest.FeedConsumer || g.replica.Store == "eventgate-0" {
		t.Fatalf("replica %+v: want id eventgate-0, ingest %s, a generated store id", g.replica, ingest.FeedConsumer)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := g.js.Stream(ctx, g.cfg.NATS.Stream)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	lister := stream.ConsumerNames(ctx)
	for name := range lister.Name() {
		names = append(names, name)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	feed := slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "watch-feed-eventgate-0-") })
	if !feed || slices.Contains(names, ingest.StoreConsumer("eventgate-0")) || slices.Contains(names, ingest.DefaultConsumer) {
		t.Fatalf("consumers of the events stream %v: want the live feed watch-feed-eventgate-0-…, no ingest consumer", names)
	}
}

func TestReplicaIDInvalid(t *testing.T) {
	for _, id := range []string{"a.b", "-x", "a b", "a*", strings.Repeat("x", 64)} {
		cfg := config.Default()
		cfg.ReplicaID = id
		err := cfg.Validate()
		if !errors.Is(err, ingest.ErrInvalidReplicaID) || !strings.Contains(err.Error(), "replica-id") {
			t.Errorf("replica id %q: %v, want an invalid replica-id error", id, err)
		}
	}
}

// TestReplicaNotReadyWhileItsStoreLags: a replica whose own ingest is
// behind by more than --ready-max-ingest-lag answers 503 on /readyz, with
// its lag, and reports the lag on /metrics.
func TestReplicaNotReadyWhileItsStoreLags(t *testing.T) {
	g := startGateway(t, func(c *config.Config) {
		c.ReadyMaxIngestLag = 300 * time.Millisecond
		c.Ingest.LagInterval = 50 * time.Millisecond
	})
	if code, body := getReadyz(t, g.httpURL); code != http.StatusOK {
		t.Fatalf("/readyz %d before the lag: %v", code, body)
	}
	// This replica stops copying the stream into its store; events go on.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.ingest.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	emit(t, g.client, testEvent("Lagging", "Pod", "ns", "p1"), testEvent("Lagging", "Pod", "ns", "p2"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := getReadyz(t, g.httpURL)
		if code == http.StatusServiceUnavailable {
			checks, _ := body["checks"].(map[string]any)
			msg, _ := checks["ingest"].(string)
			rep, _ := body["replica"].(map[string]any)
			lag, _ := rep["ingestLag"].(map[string]any)
			if !strings.Contains(msg, "not yet in this replica's store") || lag["pending"] != 2.0 || lag["oldestAgeSeconds"].(float64) <= 0.3 {
				t.Fatalf("/readyz 503 with ingest check %q and lag %v, want 2 events pending for over 0.3s", msg, lag)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d 10s after ingest stopped: %v", code, body)
		}
		time.Sleep(100 * time.Millisecond) // polling readiness, which is cached for a second
	}
	if m := metricsText(t, g.httpURL); !strings.Contains(m, "eventgate_clickhouse_ingest_pending 2") {
		t.Fatalf("/metrics does not report 2 events pending:\n%s", grepLines(m, "eventgate_clickhouse_ingest"))
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
