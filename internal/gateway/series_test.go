package gateway

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/natstest"
)

// TestSeriesAcrossReplicas emits 100 series' occurrences interleaved and
// spread round-robin over two gateway replicas sharing one NATS server and
// one ClickHouse database: the stored data holds one series per key whose
// final count equals the occurrences accepted, written a few times each.
func TestSeriesAcrossReplicas(t *testing.T) {
	ns := natstest.StartServer(t)
	seriesAcrossReplicas(t, ns.ClientURL(), 1, "series_replicas")
}

// TestSeriesAcrossReplicasOnCluster: the same with the gateways on different
// nodes of a 3-node JetStream cluster and replicated streams.
func TestSeriesAcrossReplicasOnCluster(t *testing.T) {
	cl := natstest.StartCluster(t, 3)
	seriesAcrossReplicas(t, cl.URL(), 3, "series_cluster")
}

// seriesPerKey is the occurrences per series (EVENTGATE_SERIES_PER: 10000
// for the full run).
func seriesPerKey() int {
	if n, err := strconv.Atoi(os.Getenv("EVENTGATE_SERIES_PER")); err == nil && n > 0 {
		return n
	}
	return 200
}

func seriesAcrossReplicas(t *testing.T, natsURL string, replicas int, db string) {
	const series = 100
	per := seriesPerKey()
	shared := func(c *config.Config) {
		c.NATS.URL = natsURL
		c.NATS.Replicas = replicas
		c.ClickHouse.Database = db
		// A series must not finish between two of its occurrences: under
		// the race detector and a loaded CI machine one Emit round took
		// over 3 s, and a FinishAfter of 3 s ended pod-0's series at 47
		// of 200. The windows are far above any stall; the heartbeat
		// stays above the flush interval so the write bound holds.
		c.Intake.Series.Window = 30 * time.Second
		c.Intake.Series.FlushInterval = time.Second
		c.Intake.Series.Heartbeat = 10 * time.Second
		c.Intake.Series.FinishAfter = 15 * time.Second
	}
	a := startGateway(t, shared)
	b := startGateway(t, shared)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Round r sends occurrence r of every series, half through each replica.
	start := time.Now()
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
	emitting := time.Since(start)
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
				if int(e.Series.Count) != per {
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
	// Per series: created, started, finished, a heartbeat, and at most one
	// flush per flush interval (1s here) while occurrences arrive.
	perSeries := 4 + uint64(emitting/time.Second) + 1
	if writes > uint64(series)*perSeries {
		t.Fatalf("%d writes for %d series in %v of emission: more than %d per series", writes, series, emitting, perSeries)
	}
}
