package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/client"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// A recorder whose tenant is over its emit limit waits as long as the
// gateway says (the error ack's retryAfter) before sending again, not its
// own short backoff, and every event is stored in the end.
func TestRecorderWaitsOutTheRateLimitsDelay(t *testing.T) {
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", func(c *config.Config) {
		c.MaxBatch = 10
		c.Limits.Tenant.EmitRate, c.Limits.Tenant.EmitBurst = 5, 10
	})
	c := newClient(t, g.GRPCAddr)
	var mu sync.Mutex
	type retry struct{ wait, said time.Duration }
	var limited []retry
	rec := c.NewRecorder(client.RecorderOptions{
		ReportingController: "example.com/sdk-limited", ReportingInstance: "sdk-limited-1",
		BatchSize: 10, MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Second,
		Metrics: client.Metrics{OnRetry: func(err error, wait time.Duration) {
			var re *client.RefusedError
			if errors.As(err, &re) && re.Code == "ResourceExhausted" {
				mu.Lock()
				limited = append(limited, retry{wait, re.RetryAfter})
				mu.Unlock()
			}
		}},
	})
	for i := range 30 {
		rec.Eventf(pod("limited", fmt.Sprintf("web-%d", i)), nil, client.TypeNormal, "Started", "Start", "container %d started", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := rec.Stats(); s.Stored != 30 || len(s.Dropped) != 0 {
		t.Fatalf("stats %+v, want all 30 stored", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(limited) == 0 {
		t.Fatal("the recorder was never refused: the limit did not apply")
	}
	longest := time.Duration(0)
	for _, r := range limited {
		if r.said <= 0 || r.wait < r.said {
			t.Errorf("waited %v after a refusal saying retry after %v (all: %+v)", r.wait, r.said, limited)
		}
		longest = max(longest, r.said)
	}
	// At 5 events/s a batch of 10 waits hundreds of milliseconds or more
	// (a refusal just before the bucket refills may say less), far above
	// the recorder's own 10-40 ms backoff: the waits above are the
	// gateway's, not the backoff's.
	if longest < 100*time.Millisecond {
		t.Errorf("no refusal said to wait 100 ms or more, the longest %v: the limit did not hold the recorder back (all: %+v)", longest, limited)
	}
}
