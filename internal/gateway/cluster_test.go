package gateway

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/natstest"
)

// TestReplicasOnNATSCluster runs two gateways against a 3-node JetStream
// cluster with a replicated stream: events emitted through one are watched
// live, and resumed, through the other.
func TestReplicasOnNATSCluster(t *testing.T) {
	cl := natstest.StartCluster(t, 3)
	external := func(node int) func(*config.Config) {
		return func(c *config.Config) {
			c.NATS.URL = cl.Servers[node].ClientURL()
			c.NATS.Replicas = 3
			c.ClickHouse.Database = "cluster" // one database; each embedded replica still copies the stream through its own consumer
		}
	}
	a := startGateway(t, external(0))
	b := startGateway(t, external(2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := b.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Kind: "Pod"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := 0; i < n; i++ {
		src := a
		if i%2 == 1 {
			src = b
		}
		emit(t, src.client, testEvent("Tick", "Pod", "ns", fmt.Sprintf("p%d", i)))
	}
	got := recvN(t, w, n)
	for i, r := range got {
		if r.Object.ResourceVersion != strconv.Itoa(i+1) {
			t.Fatalf("event %d has resourceVersion %s", i, r.Object.ResourceVersion)
		}
	}
	// Resume on the other replica from the middle.
	w2, err := a.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Kind: "Pod", ResourceVersion: "20"})
	if err != nil {
		t.Fatal(err)
	}
	rest := recvN(t, w2, n-20)
	if rest[0].Object.ResourceVersion != "21" || rest[len(rest)-1].Object.ResourceVersion != strconv.Itoa(n) {
		t.Fatalf("resume got %s..%s", rest[0].Object.ResourceVersion, rest[len(rest)-1].Object.ResourceVersion)
	}
}
