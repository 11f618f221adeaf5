package intake

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A replica joins the intake under its replica id, so that one restarted on
// its data directory is the same member, not a second one.
func TestReplicaAnnouncesItselfByItsReplicaID(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	nc, js := connect(t, ns, "", "pod-0")
	ensureEvents(t, js, cfg.Replicas)
	seen := make(chan string, 16)
	sub, err := nc.Subscribe("_EVENTGATE.intake."+cfg.withDefaults().Stream+".members", func(m *nats.Msg) {
		select {
		case seen <- string(m.Data):
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := start(ctx, nc, js, cfg, testLogger("pod-0"), nil, 0, AsMember("pod-0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Stop(ctx)
	})
	select {
	case id := <-seen:
		if id != "pod-0" {
			t.Errorf("announced as %q, want the replica id pod-0", id)
		}
	case <-ctx.Done():
		t.Fatal("no membership announcement")
	}
}
