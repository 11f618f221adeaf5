package console_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/gateway"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// screenshots, when set, is the directory the browser tests save their
// screenshots in (the README's pictures): go test ./internal/console
// -screenshots ../../docs/console.
var screenshots = flag.String("screenshots", "", "directory to save the browser tests' screenshots in")

var (
	chDir   string          // the ClickHouse directory every gateway of this binary shares
	browser context.Context // one headless Chromium; each test opens its own tab
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if _, err := os.Stat(chdb.DefaultLibPath()); err != nil {
		fmt.Fprintf(os.Stderr, "the embedded ClickHouse engine is missing (%v): run scripts/fetch-chdb.sh or make test\n", err)
		return 1
	}
	chromium, err := findChromium()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "eventgate-console-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	chDir = dir

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run its sandbox as root (CI containers)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	b, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	if err := chromedp.Do(b); err != nil {
		fmt.Fprintf(os.Stderr, "headless Chromium (%s) did not start: %v\n", chromium, err)
		return 1
	}
	browser = b

	sharedDir, err := os.MkdirTemp("", "eventgate-console-gateway-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(sharedDir)
	gw, stop, err := newGateway(sharedDir, "", "127.0.0.1:0", nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gateway: %v\n", err)
		return 1
	}
	sharedGW = gw
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "gateway Serve: %v\n", err)
		code = 1
	}
	return code
}

// findChromium is the Chromium the tests drive: $CHROMIUM, else the first
// of Debian's and the usual names on PATH.
func findChromium() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium for the browser tests: apt-get install chromium (or set CHROMIUM to its path)")
}

// testGateway is a gateway on loopback ports, with an embedded NATS server
// in a temporary directory and a database of its own in the shared chDB.
type testGateway struct {
	url string
	db  string // its ClickHouse database
}

var dbSeq struct {
	sync.Mutex
	n int
}

// startGateway starts a gateway for t, stopped when t ends.
func startGateway(t testing.TB, mutate func(*config.Config)) *testGateway {
	t.Helper()
	gw, stop, err := newGateway(t.TempDir(), "", "127.0.0.1:0", mutate)
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

// newGateway starts a gateway on dataDir, its ClickHouse database db (""
// for a new one) and its HTTP listener on httpAddr; stop ends it and returns
// Serve's error.
func newGateway(dataDir, db, httpAddr string, mutate func(*config.Config)) (*testGateway, func() error, error) {
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.ClickHouse.DataDir = chDir
	if db == "" {
		dbSeq.Lock()
		dbSeq.n++
		db = fmt.Sprintf("console_%d", dbSeq.n)
		dbSeq.Unlock()
	}
	cfg.ClickHouse.Database = db
	cfg.ClickHouse.BatchWait = 20 * time.Millisecond
	// A series' count reaches the store within a test's patience.
	cfg.Intake.Series.FlushInterval = 100 * time.Millisecond
	// What the pages query must be stored promptly on a busy machine too:
	// the ingest is not put behind emits and watches here.
	cfg.ClickHouse.IngestNice = 0
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, err := gateway.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		g.Close()
		return nil, nil, err
	}
	hl, err := listenRetry(httpAddr)
	if err != nil {
		cancel()
		gl.Close()
		g.Close()
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, gl, hl) }()
	stop := func() error {
		cancel()
		return <-done
	}
	return &testGateway{url: "http://" + hl.Addr().String(), db: db}, stop, nil
}

// listenRetry listens on addr, retrying for a while: a gateway that stopped
// on it may still be closing.
func listenRetry(addr string) (net.Listener, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var nsSeq atomic.Int64

// namespace is a namespace no other test (or other run of this one, with
// -count) uses, so that tests sharing a gateway see only their own events.
func namespace(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nsSeq.Add(1))
}

// sharedGW is one gateway without authentication for the tests that keep to
// names of their own (reasons, namespaces); it lives as long as the binary.
var sharedGW *testGateway

func shared(t *testing.T) *testGateway {
	t.Helper()
	if sharedGW == nil {
		t.Fatal("the shared gateway did not start")
	}
	return sharedGW
}

// tab opens a new browser tab for t. An exception in the page, or a script
// or style its Content-Security-Policy refused, fails the test.
func tab(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	var mu sync.Mutex
	var problems []string
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || (m.Type == chromedp.ConsoleType("error") && strings.Contains(m.Text, "Content Security Policy")) {
				mu.Lock()
				problems = append(problems, m.Text)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("the page reported: %s", p)
		}
	})
	tctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelT)
	return tctx
}

func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until the page's expression is true, checking every frame.
func waitJS(t *testing.T, ctx context.Context, what, expr string, timeout time.Duration) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout))); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('main').innerText.slice(0, 1500) + ' | error banner: ' + document.getElementById('error').innerText`))
		t.Fatalf("waiting for %s: %v\npage shows: %s", what, err, page)
	}
}

// waitText waits until the element sel shows text.
func waitText(t *testing.T, ctx context.Context, sel, text string, timeout time.Duration) {
	t.Helper()
	waitJS(t, ctx, fmt.Sprintf("%q in %s", text, sel), fmt.Sprintf(`(() => { const el = document.querySelector(%q); return !!el && el.innerText.includes(%q); })()`, sel, text), timeout)
}

// innerText is what the element sel shows ("" when there is none).
func innerText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return eval[string](t, ctx, fmt.Sprintf(`(document.querySelector(%q) || {innerText: ''}).innerText`, sel))
}

// shot saves a screenshot of the page as name.png when -screenshots is set.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if *screenshots == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(*screenshots, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*screenshots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// emitREST posts events as curl would and returns the response's status
// and body.
func emitREST(t *testing.T, base, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/events", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// mustEmit posts events and fails the test unless they are accepted.
func mustEmit(t *testing.T, base, token, body string) {
	t.Helper()
	if code, b := emitREST(t, base, token, body); code != http.StatusOK {
		t.Fatalf("emit: %d %s", code, b)
	}
}
