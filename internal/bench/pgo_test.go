package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPGORecorderStopWaitsForTheProfileInProgress: a recorder stopped at
// once still completes the CPU profile it started from the gateway's pprof
// endpoint, and writes the merge of what it took as a profile that
// `go tool pprof` reads as a CPU profile (what `go build -pgo` reads).
func TestPGORecorderStopWaitsForTheProfileInProgress(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	g := &Gateway{DebugURL: srv.URL}

	// Something to sample while the profiles are taken.
	spin, stopSpin := context.WithCancel(context.Background())
	defer stopSpin()
	go func() {
		x := 0
		for spin.Err() == nil {
			for i := range 1_000_000 {
				x += i * i
			}
		}
		_ = x
	}()

	dir := t.TempDir()
	ctx := context.Background()
	p := startPGO(ctx, g, dir, time.Second)
	out := filepath.Join(dir, "default.pgo")
	n, err := p.stop(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("merged %d profiles, want the one in progress at the stop", n)
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof cannot read the merged profile: %v\n%s", err, top)
	}
	if !strings.Contains(string(top), "Type: cpu") {
		t.Fatalf("the merged profile is not a CPU profile:\n%s", top)
	}
}
