package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/client"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/gateway"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// chDir is the embedded ClickHouse directory the gateways of this test
// binary share: the engine allows one storage path per process, so each
// gateway gets a database of its own in it.
var chDir string

func TestMain(m *testing.M) {
	os.Exit(chtest.MainDir(m, "eventgate-client-test-", &chDir))
}

// testGateway is a real gateway served in process on loopback.
type testGateway struct {
	grpcAddr, httpAddr string
	stop               func()
}

// startGateway serves a gateway on dataDir at grpcAddr and httpAddr
// ("127.0.0.1:0" for any port; a fixed one lets a client survive a
// restart). The caller stops it; t.Cleanup stops it too.
func startGateway(t testing.TB, dataDir, grpcAddr, httpAddr string, mutate func(*config.Config)) *testGateway {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.ClickHouse.DataDir = chDir
	h := sha256.Sum256([]byte(dataDir))
	cfg.ClickHouse.Database = "sdk_" + hex.EncodeToString(h[:6])
	cfg.ClickHouse.BatchWait = 20 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, err := gateway.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	gl := listen(t, grpcAddr)
	hl := listen(t, httpAddr)
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, gl, hl) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &testGateway{grpcAddr: gl.Addr().String(), httpAddr: hl.Addr().String(), stop: stop}
}

// listen listens on addr, retrying a while: the previous gateway on a fixed
// address may still be closing.
func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the address is released by a gateway closing
	}
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
