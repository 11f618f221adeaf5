package client_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventgate/eventgate/client"
	"github.com/eventgate/eventgate/internal/gateway/gatewaytest"
)

// gatewayProcess is the gateway binary running as a child process on
// fixed addresses, so that a client outlives its restarts.
type gatewayProcess struct {
	bin, dataDir       string
	grpcAddr, httpAddr string
	cmd                *exec.Cmd
}

func buildGateway(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gateway")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/eventgate/eventgate/cmd/gateway").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l := gatewaytest.Listen(t, "127.0.0.1:0")
	defer l.Close()
	return l.Addr().String()
}

// start runs the gateway and waits until it is ready.
func (p *gatewayProcess) start(t *testing.T) {
	t.Helper()
	if err := p.launch(t); err != nil {
		t.Fatal(err)
	}
}

// launch is start for any goroutine: it reports instead of failing t.
func (p *gatewayProcess) launch(t *testing.T) error {
	p.cmd = exec.Command(p.bin, "--data-dir", p.dataDir, "--grpc-addr", p.grpcAddr, "--http-addr", p.httpAddr, "--log-level", "error",
		"--ingest-batch-wait", "50ms")
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	if err := p.cmd.Start(); err != nil {
		return err
	}
	cmd := p.cmd
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + p.httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway at %s not ready after 60s: %v", p.httpAddr, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the process' readiness endpoint
	}
}

// kill ends the gateway with SIGKILL: nothing is flushed or closed.
func (p *gatewayProcess) kill() error {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	_ = p.cmd.Wait()
	return nil
}

// TestRecorderExactlyOnceAcrossGatewayKills is the SDK's promise: a
// service emits 100,000 events through a Recorder while the gateway is
// killed with SIGKILL and restarted twice; every event the Recorder did
// not report as dropped is stored exactly once, and Eventf never waited
// for the gateway.
func TestRecorderExactlyOnceAcrossGatewayKills(t *testing.T) {
	const total = 100_000
	p := &gatewayProcess{bin: buildGateway(t), dataDir: t.TempDir(), grpcAddr: freeAddr(t), httpAddr: freeAddr(t)}
	p.start(t)
	c := newClient(t, p.grpcAddr)

	var mu sync.Mutex
	dropped := map[string]client.DropReason{}
	rec := c.NewRecorder(client.RecorderOptions{
		ReportingController: "example.com/kill-test",
		ReportingInstance:   "kill-test-1",
		QueueSize:           50_000,
		MaxBackoff:          time.Second,
		Metrics: client.Metrics{OnDrop: func(ev *client.Event, r client.DropReason) {
			mu.Lock()
			dropped[ev.Uid] = r
			mu.Unlock()
		}},
	})
	uids := make([]string, 0, total)
	lat := newLatencies(t)
	restarted := make(chan struct{})
	killAt := map[int]bool{total / 4: true, total / 2: true}
	kills := make(chan struct{}, 2)
	go func() {
		defer close(restarted)
		for range 2 {
			<-kills
			if err := p.kill(); err != nil {
				t.Error(err)
				return
			}
			if err := p.launch(t); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	// A steady service: 100 events every 10ms (10,000/s), each about an
	// object of its own so that none is folded into a series.
	tick := time.NewTicker(10 * time.Millisecond)
	for i := 0; i < total; {
		<-tick.C
		for j := 0; j < 100 && i < total; j, i = j+1, i+1 {
			ref := &client.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "kill", Name: fmt.Sprintf("pod-%d", i)}
			ev := &client.Event{
				Regarding: ref, Namespace: "kill", Type: client.TypeNormal, Reason: "Tick", Action: "Tick", Note: fmt.Sprintf("event %d", i),
				ReportingController: "example.com/kill-test", ReportingInstance: "kill-test-1",
			}
			lat.measure(func() { rec.Record(ev) })
			uids = append(uids, ev.Uid)
			if killAt[i] {
				kills <- struct{}{}
			}
		}
	}
	tick.Stop()
	lat.release()
	<-restarted
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatalf("Close: %v (stats %+v)", err, rec.Stats())
	}
	stats := rec.Stats()
	t.Logf("recorder: %+v", stats)
	lat.check(t)

	mu.Lock()
	defer mu.Unlock()
	want := total - len(dropped)
	if want < total/2 {
		t.Fatalf("%d of %d events dropped: the test proves little", len(dropped), total)
	}
	var seen map[string]int
	eventually(t, 90*time.Second, "stored events", func() (bool, string) {
		seen = map[string]int{}
		for ev, err := range c.Query(ctx, &client.QueryRequest{ReportingController: []string{"example.com/kill-test"}, PageSize: 1000}) {
			if err != nil {
				return false, err.Error()
			}
			seen[ev.Uid]++
		}
		return len(seen) >= want, fmt.Sprintf("%d of %d stored", len(seen), want)
	})
	for _, uid := range uids {
		n, reason := seen[uid], dropped[uid]
		switch {
		case reason != "" && n > 0:
			t.Errorf("event %s reported dropped (%s) but stored", uid, reason)
		case reason == "" && n != 1:
			t.Errorf("event %s stored %d times, want once", uid, n)
		}
	}
	if len(seen) != want {
		t.Errorf("%d events stored, want %d", len(seen), want)
	}
}
