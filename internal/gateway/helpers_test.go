package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// testGateway is a gateway on loopback ports with an embedded NATS server in
// a temporary directory.
type testGateway struct {
	*Gateway
	grpcAddr string
	httpURL  string
	client   eventgatev1.EventServiceClient
	conn     *grpc.ClientConn
	stop     func()
}

func startGateway(t testing.TB, mutate func(*config.Config), opts ...Option) *testGateway {
	t.Helper()
	tg := startGatewayWith(t, t.TempDir(), mutate, opts...)
	t.Cleanup(tg.stop)
	return tg
}

// startGatewayIn starts a gateway on dataDir; the caller stops it.
func startGatewayIn(t testing.TB, dataDir string) *testGateway {
	t.Helper()
	return startGatewayWith(t, dataDir, nil)
}

func startGatewayWith(t testing.TB, dataDir string, mutate func(*config.Config), opts ...Option) *testGateway {
	t.Helper()
	return startGatewayOn(t, dataDir, "127.0.0.1:0", mutate, opts...)
}

// startGatewayOn is startGatewayWith with the HTTP listener on httpAddr: a
// fixed address lets clients survive a restart on it (it is retried for a
// while, as the previous gateway on it may still be closing).
func startGatewayOn(t testing.TB, dataDir, httpAddr string, mutate func(*config.Config), opts ...Option) *testGateway {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.ClickHouse.DataDir = chDir
	cfg.ClickHouse.Database = databaseFor(dataDir)
	cfg.ClickHouse.BatchWait = 20 * time.Millisecond
	// Every gateway of this test process opens and closes an engine, and
	// the background threads of a closed one go back to the engine's
	// pool under SCHED_IDLE, to run statements there: only a process that
	// can take them back out of it (chdb.CanLeaveIdle) may put them under
	// it, or a loaded machine starves the inserts of later gateways.
	cfg.ClickHouse.BackgroundIdle = chdb.CanLeaveIdle()
	// Tests stamp their events with fixed dates, which a default query
	// window would leave behind; limits_test.go tests the window.
	cfg.Limits.Tenant.QueryWindow, cfg.Limits.Tenant.MaxQueryWindow = 0, 0
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := testLogger(t, "on "+dataDir)
	ctx, cancel := context.WithCancel(context.Background())
	g, err := New(ctx, cfg, log, opts...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var hl net.Listener
	for deadline := time.Now().Add(10 * time.Second); ; {
		if hl, err = net.Listen("tcp", httpAddr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, gl, hl) }()
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			conn.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	return &testGateway{Gateway: g, grpcAddr: gl.Addr().String(), httpURL: "http://" + hl.Addr().String(), client: eventgatev1.NewEventServiceClient(conn), conn: conn, stop: stop}
}

func testEvent(reason, kind, ns, name string) *eventgatev1.Event {
	return &eventgatev1.Event{
		Reason:              reason,
		Note:                "note for " + name,
		ReportingController: "example.com/test-controller",
		ReportingInstance:   "test-1",
		Action:              "Test",
		Regarding:           &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: kind, Namespace: ns, Name: name},
	}
}

func emit(t testing.TB, c eventgatev1.EventServiceClient, evs ...*eventgatev1.Event) []*eventgatev1.EmitResult {
	t.Helper()
	resp, err := c.Emit(context.Background(), &eventgatev1.EmitRequest{Events: evs})
	if err != nil {
		t.Fatalf("Emit: %v", err)
	}
	return resp.Results
}

// ndjsonWatch opens a REST watch and returns its decoded lines.
func ndjsonWatch(t testing.TB, ctx context.Context, url string) (*http.Response, <-chan map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 1024)
	go func() {
		defer close(lines)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("watch line %q: %v", sc.Text(), err)
				return
			}
			lines <- m
		}
	}()
	return resp, lines
}

func postJSON(t testing.TB, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("response body: %v", err)
	}
	return resp.StatusCode, m
}

func mustJSON(t testing.TB, ev *eventgatev1.Event) string {
	b, err := protojson.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// watchEstablished opens a watch and waits until it is established (its
// header sent): events emitted after it returns reach it.
func watchEstablished(t testing.TB, ctx context.Context, c eventgatev1.EventServiceClient, req *eventgatev1.StreamWatchRequest) grpc.ServerStreamingClient[eventgatev1.StreamWatchResponse] {
	t.Helper()
	w, err := c.StreamWatch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	return w
}

func recvN(t testing.TB, s grpc.ServerStreamingClient[eventgatev1.StreamWatchResponse], n int) []*eventgatev1.StreamWatchResponse {
	t.Helper()
	var out []*eventgatev1.StreamWatchResponse
	for len(out) < n {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("Recv after %d of %d: %v", len(out), n, err)
		}
		if r.Type == "BOOKMARK" {
			continue
		}
		out = append(out, r)
	}
	return out
}

// restStatus sends method url (with body, when not empty) as the bearer of
// token ("" for none) and returns the status code.
func restStatus(t testing.TB, method, url, token, body string) int {
	t.Helper()
	code, _ := k8sRaw(t, method, url, token, "", body)
	return code
}

// sortedKeys returns the keys of m in order.
func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// restDo sends method url with body (none when empty) and returns the status
// code, the Allow header and the decoded JSON body (nil when not JSON).
func restDo(t *testing.T, method, url, contentType string, body io.Reader) (int, string, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	// Bounded: a watch that opens instead of failing must not hang the test.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, resp.Header.Get("Allow"), m
}

// violationFields are the fields of a REST error body's google.rpc.BadRequest.
func violationFields(m map[string]any) []string {
	var fields []string
	details, _ := m["details"].([]any)
	for _, d := range details {
		dm, _ := d.(map[string]any)
		vs, _ := dm["fieldViolations"].([]any)
		for _, v := range vs {
			vm, _ := v.(map[string]any)
			if f, ok := vm["field"].(string); ok {
				fields = append(fields, f)
			}
		}
	}
	return fields
}

// emitBulk emits n events of kind Job named prefix0, prefix1, … in batches
// of 500, each with a 1 KB note: more than a client's flow-control windows
// hold, so that a watcher that does not read blocks its sends.
// It returns the highest resourceVersion stored.
func emitBulk(t *testing.T, tg *testGateway, reason, prefix string, n int) string {
	t.Helper()
	note := strings.Repeat("x", 1000)
	var last uint64
	for i := 0; i < n; i += 500 {
		var evs []*eventgatev1.Event
		for j := i; j < min(i+500, n); j++ {
			e := testEvent(reason, "Job", "ns", fmt.Sprintf("%s%d", prefix, j))
			e.Note = note
			evs = append(evs, e)
		}
		rv, _ := strconv.ParseUint(maxRV(emit(t, tg.client, evs...)), 10, 64)
		last = max(last, rv)
	}
	return strconv.FormatUint(last, 10)
}
