package gateway

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/clickhouse/chdbhttp"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/natstest"
)

// stallProxy forwards TCP connections to a target and can stall: while
// stalled, each direction holds the next chunk it reads (recording what
// clients sent) and forwards nothing, as a peer that stopped answering
// would, until resumed.
type stallProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	stalled bool
	held    bytes.Buffer // what clients sent while stalled
	conns   []net.Conn
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{t: t, ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(s, c, true)
		go p.pipe(c, s, false)
	}
}

func (p *stallProxy) pipe(dst, src net.Conn, fromClient bool) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.stalled && fromClient {
				p.held.Write(buf[:n])
			}
			for p.stalled {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	p.stalled = true
	p.held.Reset()
	p.mu.Unlock()
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	p.stalled = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// waitHeld waits until what clients sent while stalled contains s.
func (p *stallProxy) waitHeld(s string, within time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		p.mu.Lock()
		ok := bytes.Contains(p.held.Bytes(), []byte(s))
		p.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			p.mu.Lock()
			held := p.held.String()
			p.mu.Unlock()
			p.t.Fatalf("no %q reached the stalled %s within %v; held %q", s, p.target, within, held[:min(len(held), 2000)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *stallProxy) close() {
	_ = p.ln.Close()
	p.resume()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// TestShutdownWithinOneTimeoutWhenNATSAndClickHouseStall: the shutdown
// timeout bounds the whole shutdown, as the chart promises the kubelet
// (terminationGracePeriodSeconds is the timeout plus a little), not each of
// its steps. Here every step is slow at once: NATS and ClickHouse stop
// answering while an Emit is in flight, the ingest is inserting a batch and
// the intake has partitions to checkpoint. Before, the drain, the intake's
// checkpoint and the ingest's batch each had the whole timeout and then
// each NATS connection five seconds of its own. Whatever the steps left is
// taken up as after a crash: once both answer again, a gateway started on
// the same stream and store returns every acknowledged event exactly once.
func TestShutdownWithinOneTimeoutWhenNATSAndClickHouseStall(t *testing.T) {
	e, err := chdb.Open(chdb.Options{DataDir: chDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	chLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	chSrv := &http.Server{Handler: chdbhttp.NewServer(e), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := chSrv.Serve(chLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("clickhouse endpoint: %v", err)
		}
	}()
	t.Cleanup(func() { _ = chSrv.Close() })
	ns := natstest.StartServer(t)
	natsProxy := startStallProxy(t, ns.Addr().String())
	chProxy := startStallProxy(t, chLn.Addr().String())

	const timeout = 6 * time.Second
	dir := t.TempDir()
	db := databaseFor(dir)
	remote := func(natsURL, chAddr string) func(*config.Config) {
		return func(c *config.Config) {
			c.ShutdownTimeout = timeout
			c.NATS.URL = natsURL
			c.ClickHouse.DataDir = ""
			c.ClickHouse.DSN = "http://" + chAddr
			c.ClickHouse.Database = db
			c.Ingest.AckWait = 5 * time.Second
		}
	}
	tg := startGatewayWith(t, dir, remote("nats://"+natsProxy.addr(), chProxy.addr()))
	t.Cleanup(tg.stop)

	acked := map[string]bool{}
	emitSome := func(prefix string, n int) string {
		var evs []*eventgatev1.Event
		for i := range n {
			evs = append(evs, testEvent("Stall", "Job", "ns", prefix+strconv.Itoa(i)))
		}
		res := emit(t, tg.client, evs...)
		for _, r := range res {
			acked[r.GetUid()] = true
		}
		return maxRV(res)
	}
	waitIngested(t, tg, emitSome("before-", 20))

	// ClickHouse stops answering: the ingest's next insert hangs (clickhouse-go
	// starts one by describing the table).
	chProxy.stall()
	emitSome("during-", 20)
	chProxy.waitHeld("DESCRIBE TABLE", 30*time.Second)

	// NATS stops answering: an Emit hangs in flight, and so will the
	// intake's checkpoints.
	natsProxy.stall()
	// On a connection of its own: the test's is closed at the stop.
	conn, err := grpc.NewClient(tg.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	inflight := make(chan error, 1)
	go func() {
		_, err := eventgatev1.NewEventServiceClient(conn).Emit(context.Background(), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{testEvent("Stall", "Job", "ns", "in-flight")}})
		inflight <- err
	}()
	natsProxy.waitHeld("PUB", 30*time.Second)

	start := time.Now()
	tg.stop()
	took := time.Since(start)
	t.Logf("shutdown took %v (timeout %v)", took.Round(time.Millisecond), timeout)
	// Besides the timeout, only closing what is local remains: here (a
	// remote NATS and ClickHouse) next to nothing.
	if limit := timeout + 2*time.Second; took > limit {
		t.Fatalf("shutdown with NATS and ClickHouse stalled took %v, want at most %v (shutdown timeout %v)", took.Round(time.Millisecond), limit, timeout)
	}
	select {
	case err := <-inflight:
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Errorf("the Emit in flight at the shutdown ended with %v, want Unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Emit in flight at the shutdown has not ended")
	}

	natsProxy.resume()
	chProxy.resume()
	tg2 := startGatewayWith(t, t.TempDir(), remote(ns.ClientURL(), chLn.Addr().String()))
	defer tg2.stop()
	counts := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		resp, err := tg2.client.Query(ctx, &eventgatev1.QueryRequest{Reason: []string{"Stall"}, PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		counts = map[string]int{}
		for _, ev := range resp.Events {
			counts[ev.GetUid()]++
		}
		have := 0
		for uid := range acked {
			if counts[uid] > 0 {
				have++
			}
		}
		if have == len(acked) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for uid := range acked {
		if counts[uid] != 1 {
			t.Errorf("acknowledged event %s is stored %d times after the restart, want once", uid, counts[uid])
		}
	}
	for uid, n := range counts {
		if n != 1 {
			t.Errorf("event %s is stored %d times after the restart", uid, n)
		}
	}
}
