package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// pgoChunk is the length of each CPU profile the bench's PGO recorder
// takes: the profiles follow each other with no gap, and stopping waits for
// the one in progress.
const pgoChunk = 10 * time.Second

// pgoRecorder takes back-to-back CPU profiles of the gateway (its pprof
// endpoint) while the write and latency phases run, for a profile-guided
// build of the gateway (cmd/gateway/default.pgo).
type pgoRecorder struct {
	cancel context.CancelFunc
	done   chan []string // the profiles taken, when the loop ends
	err    error         // why the loop ended early, read after done
}

// startPGO profiles g in chunks of chunk, into dir, until stop.
func startPGO(ctx context.Context, g *Gateway, dir string, chunk time.Duration) *pgoRecorder {
	ctx, cancel := context.WithCancel(ctx)
	p := &pgoRecorder{cancel: cancel, done: make(chan []string, 1)}
	go func() {
		var paths []string
		// At least one profile; the request outlives a stop, so the one in
		// progress completes.
		for i := 1; ; i++ {
			path := filepath.Join(dir, fmt.Sprintf("pgo.%03d.pb.gz", i))
			if err := g.SaveCPUProfile(context.WithoutCancel(ctx), chunk, path); err != nil {
				p.err = err
				break
			}
			paths = append(paths, path)
			if ctx.Err() != nil {
				break
			}
		}
		p.done <- paths
	}()
	return p
}

// stop waits for the profile in progress and merges every profile taken
// into out (`go tool pprof -proto`, which sums their samples).
func (p *pgoRecorder) stop(ctx context.Context, out string) (int, error) {
	p.cancel()
	paths := <-p.done
	if len(paths) == 0 {
		return 0, fmt.Errorf("no CPU profile was taken: %w", p.err)
	}
	f, err := os.Create(out)
	if err != nil {
		return 0, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof", "-proto"}, paths...)...)
	cmd.Stdout, cmd.Stderr = f, &stderr
	runErr := cmd.Run()
	if err := f.Close(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		return 0, fmt.Errorf("go tool pprof -proto: %w: %s", runErr, stderr.String())
	}
	return len(paths), nil
}
