package client_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/eventgate/eventgate/client"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/gateway/gatewaytest"
)

// chDir is the embedded ClickHouse directory the gateways of this test
// binary share: the engine allows one storage path per process, so each
// gateway gets a database of its own in it.
var chDir string

func TestMain(m *testing.M) {
	os.Exit(chtest.MainDir(m, "eventgate-client-test-", &chDir))
}

// startGateway serves a real gateway in process (gatewaytest.Start), its
// database named sdk_….
func startGateway(t testing.TB, dataDir, grpcAddr, httpAddr string, mutate func(*config.Config)) *gatewaytest.Gateway {
	t.Helper()
	return gatewaytest.Start(t, chDir, "sdk_", dataDir, grpcAddr, httpAddr, mutate)
}

func newClient(t testing.TB, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addr, append([]client.Option{client.WithInsecure()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// queryAll returns the events req selects, every page.
func queryAll(t testing.TB, ctx context.Context, c *client.Client, req *client.QueryRequest) []*client.Event {
	t.Helper()
	var out []*client.Event
	for ev, err := range c.Query(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// eventually polls cond until it holds or d passes: ingest into ClickHouse
// is asynchronous, and the store is what is asked.
func eventually(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(50 * time.Millisecond) // polling the store's state
	}
}
