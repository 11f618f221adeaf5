package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/config"
	"github.com/eventgate/eventgate/internal/natstest"
)

// TestSeriesAcrossReplicas emits 100 series' occurrences interleaved and
// spread round-robin over two gateway replicas sharing one NATS server and
// one ClickHouse database: the stored data holds one series per key whose
// final count equals the occurrences accepted, written a few times each.
func TestSeriesAcrossReplicas(t *testing.T) {
	const series, per = 100, 200
	ns := natstest.StartServer(t)
	shared := func(c *config.Config) {
		c.NATS.URL = ns.ClientURL()
		c.ClickHouse.Database = "series_replicas"
		c.Intake.Series.Window = 5 * time.Second
		c.Intake.Series.FlushInterval = time.Second
		c.Intake.Series.Heartbeat = 2 * time.Second
		c.Intake.Series.FinishAfter = 3 * time.Second
	}
	a := startGateway(t, shared)
	b := startGateway(t, shared)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Round r sends occurrence r of every series, half through each replica.
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for k, g := range []*testGateway{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < per; r++ {
				var evs []*eventgatev1.Event
				for s := k; s < series; s += 2 {
					evs = append(evs, &eventgatev1.Event{Reason: "CrashLoop", Note: fmt.Sprintf("round %d", r),
						Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("pod-%d", s)}})
				}
				if _, err := g.client.Emit(ctx, &eventgatev1.EmitRequest{Events: evs}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every series finishes FinishAfter after its last occurrence; then the
	// store holds one event per series, finished, with the exact count.
	for {
		resp, err := a.client.Query(ctx, &eventgatev1.QueryRequest{Reason: []string{"CrashLoop"}, PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		finished, wrong := 0, ""
		for _, e := range resp.Events {
			if e.Series.GetState() == "Finished" {
				finished++
				if e.Series.Count != per {
					wrong = fmt.Sprintf("%s: count %d", e.Regarding.Name, e.Series.Count)
				}
			}
		}
		if wrong != "" {
			t.Fatalf("series %s, want %d", wrong, per)
		}
		if len(resp.Events) > series {
			t.Fatalf("%d stored events for %d series", len(resp.Events), series)
		}
		if finished == series {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d series finished", finished, series)
		case <-time.After(200 * time.Millisecond): // waiting for the finish timers
		}
	}
	s, err := a.js.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writes := info.State.Msgs
	t.Logf("%d occurrences, %d writes to the events stream: %.0fx fewer", series*per, writes, float64(series*per)/float64(writes))
	if writes > series*8 {
		t.Fatalf("%d writes for %d series: more than a few per series", writes, series)
	}
}
