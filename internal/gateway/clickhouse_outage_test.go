package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/clickhouse/chdbhttp"
	"github.com/eventgate/eventgate/internal/natstest"
)

// switchableClickHouse serves the engine over the ClickHouse HTTP interface
// on one address that can go down (listener closed, connections cut, so
// clients get "connection refused") and come back.
type switchableClickHouse struct {
	t    *testing.T
	e    *chdb.Engine
	addr string
	mu   sync.Mutex
	srv  *http.Server
}

func startSwitchableClickHouse(t *testing.T, e *chdb.Engine) *switchableClickHouse {
	c := &switchableClickHouse{t: t, e: e, addr: "127.0.0.1:0"}
	c.up()
	t.Cleanup(c.down)
	return c
}

func (c *switchableClickHouse) up() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		c.t.Fatalf("clickhouse endpoint back on %s: %v", c.addr, err)
	}
	c.addr = ln.Addr().String()
	c.srv = &http.Server{Handler: chdbhttp.NewServer(c.e), ReadHeaderTimeout: 10 * time.Second}
	go func(srv *http.Server) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.t.Errorf("clickhouse endpoint: %v", err)
		}
	}(c.srv)
}

func (c *switchableClickHouse) down() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv != nil {
		_ = c.srv.Close()
		c.srv = nil
	}
}

// TestClickHouseOutageLosesNothing takes the shared ClickHouse away from
// two gateway replicas for a minute while they take events. Emits go on
// being acknowledged (they need only JetStream), watches go on, and once
// ClickHouse is back each replica's ingest catches up: a Query to each
// returns every acknowledged event exactly once, and the watch saw each
// once, in order.
func TestClickHouseOutageLosesNothing(t *testing.T) {
	e, err := chdb.Open(chdb.Options{DataDir: chDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ch := startSwitchableClickHouse(t, e)
	ns := natstest.StartServer(t)
	bin := buildGateway(t)
	flags := []string{"--nats-url", ns.ClientURL(), "--clickhouse-dsn", "http://" + ch.addr,
		"--clickhouse-database", databaseFor(t.TempDir()), "--intake-decision-timeout", "1s", "--ready-max-ingest-lag", "10m"}
	ps := []*replicaProcess{startReplica(t, bin, t.TempDir(), flags...), startReplica(t, bin, t.TempDir(), flags...)}
	ids := []readyReplica{replicaOf(t, ps[0].httpURL), replicaOf(t, ps[1].httpURL)}

	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watched := watchAcross(wctx, t, ps[0].client, ps[1].client)
	e2 := &emitter{acked: map[string]bool{}}
	for range 10 {
		e2.emit(ps...)
	}
	before := len(e2.ackedUIDs())
	if before == 0 {
		t.Fatal("nothing acknowledged before the outage")
	}

	// A minute without ClickHouse, emitting all along at a steady 200
	// events a second (what piles up must be copied and queried after).
	ch.down()
	outage := time.After(time.Minute)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
emitting:
	for {
		select {
		case <-outage:
			break emitting
		case <-tick.C:
			e2.emit(ps...)
		}
	}
	during := len(e2.ackedUIDs()) - before
	t.Logf("%d events acknowledged during the outage", during)
	if during == 0 {
		t.Fatal("no emit was acknowledged while ClickHouse was down: emits must need only JetStream")
	}
	ch.up()
	for range 5 {
		e2.emit(ps...)
	}

	acked := e2.ackedUIDs()
	expectWatchSawEachOnce(t, watched, acked)
	expectEveryReplicaReturnsEachOnce(t, ps, ids, acked)
}
