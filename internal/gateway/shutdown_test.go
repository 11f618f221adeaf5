package gateway

import (
	"context"
	"strconv"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/config"
)

// TestShutdownFinishesIngest: a gateway stopped (its context ended, as on
// SIGTERM) while its ClickHouse ingest holds fetched events inserts and
// acknowledges them before it exits: after a restart every acknowledged
// event is queryable at once, not after the ingest's ack wait (a minute)
// when unacknowledged deliveries would come back.
func TestShutdownFinishesIngest(t *testing.T) {
	dir := t.TempDir()
	slowIngest := func(c *config.Config) {
		// A batch is held for a while before its insert: the stop comes
		// while the ingest has the events in hand.
		c.ClickHouse.BatchWait = 3 * time.Second
		c.Ingest.AckWait = time.Minute
	}
	tg := startGatewayWith(t, dir, slowIngest)
	const n = 300
	for i := 0; i < n; i += 50 {
		var evs []*eventgatev1.Event
		for k := i; k < i+50; k++ {
			evs = append(evs, testEvent("Stop", "Pod", "ns", "p-"+strconv.Itoa(k)))
		}
		emit(t, tg.client, evs...)
	}
	tg.stop()

	tg = startGatewayWith(t, dir, nil)
	defer tg.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := 0
	for ctx.Err() == nil {
		resp, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{Reason: []string{"Stop"}, PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if got = len(resp.Events); got == n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("after the restart %d of %d acknowledged events are queryable within 20s (ingest ack wait 1m)", got, n)
}
