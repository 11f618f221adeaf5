package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// gatewayProcess is the real gateway binary running as a child process.
type gatewayProcess struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpURL  string
}

// buildGateway returns the gateway binary, built once per test binary
// (linking it takes 10-15 s on two cores) into a directory TestMain removes.
func buildGateway(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "eventgate-gateway-bin-")
		if built.err != nil {
			return
		}
		bin := filepath.Join(built.dir, "gateway")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/eventgate/eventgate/cmd/gateway").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// built is the gateway binary buildGateway built for this test binary.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startProcess runs the gateway binary on dataDir with extra flags and waits
// until it is ready.
func startProcess(t *testing.T, bin, dataDir string, extra ...string) *gatewayProcess {
	t.Helper()
	p := &gatewayProcess{grpcAddr: freeAddr(t), httpURL: "http://" + freeAddr(t)}
	args := append([]string{"--data-dir", dataDir, "--grpc-addr", p.grpcAddr, "--http-addr", p.httpURL[len("http://"):],
		"--ingest-batch-size", "500", "--ingest-batch-wait", "50ms", "--ingest-ack-wait", "3s", "--log-level", "warn"}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.httpURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway at %s not ready after 60s: %v", p.httpURL, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the process' readiness endpoint
	}
}

// TestCrashWhileIngesting kills the gateway process (SIGKILL) while it is
// emitting and ingesting, restarts it on the same data directory, and checks
// that every acknowledged event is queryable exactly once.
func TestCrashWhileIngesting(t *testing.T) {
	bin := buildGateway(t)
	dir := t.TempDir()
	p := startProcess(t, bin, dir)
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	client := eventgatev1.NewEventServiceClient(conn)

	var mu sync.Mutex
	acked := map[string]bool{}
	killAt := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := 0; ; b++ {
			var evs []*eventgatev1.Event
			for i := 0; i < 100; i++ {
				evs = append(evs, testEvent("Crash", "Pod", "ns", fmt.Sprintf("p%d-%d", b, i)))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := client.Emit(ctx, &eventgatev1.EmitRequest{Events: evs, IdempotencyKey: fmt.Sprintf("batch-%d", b)})
			cancel()
			if err != nil {
				return // the gateway died: this batch was not acknowledged
			}
			mu.Lock()
			for _, r := range resp.Results {
				acked[r.Uid] = true
			}
			n := len(acked)
			mu.Unlock()
			if n == 5000 {
				close(killAt)
			}
		}
	}()
	<-killAt
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	<-done
	conn.Close()

	p = startProcess(t, bin, dir)
	conn, err = grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client = eventgatev1.NewEventServiceClient(conn)
	mu.Lock()
	want := len(acked)
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		seen := map[string]int{}
		req := &eventgatev1.QueryRequest{PageSize: 1000, Reason: []string{"Crash"}}
		for {
			resp, err := client.Query(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range resp.Events {
				seen[e.Uid]++
			}
			if resp.NextPageToken == "" {
				break
			}
			req.PageToken = resp.NextPageToken
		}
		missing := 0
		for uid := range acked {
			if seen[uid] == 0 {
				missing++
			}
		}
		for uid, n := range seen {
			if n != 1 {
				t.Fatalf("event %s returned %d times", uid, n)
			}
		}
		if missing == 0 {
			t.Logf("%d acknowledged events, %d stored (unacknowledged ones may be stored too), each once", want, len(seen))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d acknowledged events never became queryable after the restart", missing, want)
		case <-time.After(100 * time.Millisecond): // ingest catching up after the restart
		}
	}
}
