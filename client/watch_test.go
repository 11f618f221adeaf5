package client_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventgate/eventgate/client"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

func emitN(t *testing.T, ctx context.Context, c *client.Client, reason string, from, n int) []*client.EmitResult {
	t.Helper()
	var evs []*client.Event
	for i := from; i < from+n; i++ {
		evs = append(evs, &client.Event{Reason: reason, Type: client.TypeNormal, Action: "Test", Note: fmt.Sprintf("%s %d", reason, i),
			ReportingController: "example.com/watch-test", Regarding: pod("web", fmt.Sprintf("p-%d", i))})
	}
	resp, err := c.Emit(ctx, &client.EmitRequest{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Results
}

// TestWatchResumesAcrossGatewayRestart: a Watch from a list's
// resourceVersion outlives a gateway restart and yields every later event
// once, in order.
func TestWatchResumesAcrossGatewayRestart(t *testing.T) {
	dataDir := t.TempDir()
	g := startGateway(t, dataDir, "127.0.0.1:0", "127.0.0.1:0", nil)
	c := newClient(t, g.GRPCAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As an informer: list, then watch from the list's resourceVersion;
	// what is emitted in between is not missed.
	var rv string
	for _, err := range c.QueryResourceVersion(ctx, &client.QueryRequest{Namespace: "web"}, &rv) {
		if err != nil {
			t.Fatal(err)
		}
	}
	emitN(t, ctx, c, "A", 0, 2)
	reconnects := 0
	var got []string
	for we, err := range c.Watch(ctx, &client.StreamWatchRequest{Namespace: "web", ResourceVersion: rv},
		client.WatchOptions{MaxBackoff: 200 * time.Millisecond, OnReconnect: func(error) { reconnects++ }}) {
		if err != nil {
			t.Fatal(err)
		}
		if we.Type == client.Bookmark {
			continue
		}
		got = append(got, we.Event.Note)
		if len(got) == 2 {
			g.Stop()
			g = startGateway(t, dataDir, g.GRPCAddr, g.HTTPAddr, nil)
			emitN(t, ctx, c, "B", 0, 2)
		}
		if len(got) == 4 {
			break
		}
	}
	// Events about different objects may be stored in either order (the
	// intake partitions by object); each is yielded once.
	slices.Sort(got)
	if want := "A 0,A 1,B 0,B 1"; strings.Join(got, ",") != want {
		t.Errorf("watch yielded %v, want %s", got, want)
	}
	if reconnects == 0 {
		t.Error("the watch never reconnected")
	}
}

// TestWatchRelistsWhenItsPositionExpired: the gateway's stream no longer
// holds the watch's position (410 Gone); Watch re-lists the events after
// it from the store, marked Relisted, and goes on live.
func TestWatchRelistsWhenItsPositionExpired(t *testing.T) {
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", func(c *config.Config) { c.NATS.MaxBytes = 1500 })
	c := newClient(t, g.GRPCAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// One at a time, each stored before the next pushes the oldest out of
	// the (tiny) stream: the store keeps them all.
	var res []*client.EmitResult
	for i := range 12 {
		res = append(res, emitN(t, ctx, c, "Old", i, 1)...)
		eventually(t, 20*time.Second, "the old events stored", func() (bool, string) {
			n := len(queryAll(t, ctx, c, &client.QueryRequest{Reason: []string{"Old"}}))
			return n == i+1, fmt.Sprintf("%d of %d", n, i+1)
		})
	}
	var got []string
	relisted := 0
	for we, err := range c.Watch(ctx, &client.StreamWatchRequest{Namespace: "web", ResourceVersion: res[1].ResourceVersion}, client.WatchOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if we.Type == client.Bookmark {
			continue
		}
		got = append(got, we.Event.Note)
		if we.Relisted {
			relisted++
		}
		if len(got) == 10 {
			emitN(t, ctx, c, "New", 0, 1)
		}
		if len(got) == 11 {
			break
		}
	}
	slices.Sort(got[:10])
	want := []string{"Old 10", "Old 11", "Old 2", "Old 3", "Old 4", "Old 5", "Old 6", "Old 7", "Old 8", "Old 9", "New 0"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("watch yielded %v, want %v", got, want)
	}
	if relisted != 10 {
		t.Errorf("%d events marked relisted, want the 10 old ones", relisted)
	}
}

// TestQueryIteratesEveryPage: Query yields all events across keyset pages.
func TestQueryIteratesEveryPage(t *testing.T) {
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", nil)
	c := newClient(t, g.GRPCAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	emitN(t, ctx, c, "Paged", 0, 35)
	var got []string
	eventually(t, 20*time.Second, "35 events in pages of 10", func() (bool, string) {
		got = got[:0]
		for ev, err := range c.Query(ctx, &client.QueryRequest{Reason: []string{"Paged"}, PageSize: 10, Order: client.OrderOldestFirst}) {
			if err != nil {
				return false, err.Error()
			}
			got = append(got, ev.Note)
		}
		return len(got) == 35, fmt.Sprintf("%d of 35", len(got))
	})
	for i, n := range got {
		if want := fmt.Sprintf("Paged %d", i); n != want {
			t.Fatalf("event %d is %q, want %q", i, n, want)
		}
	}
	// Stopping early stops reading.
	n := 0
	for range c.Query(ctx, &client.QueryRequest{Reason: []string{"Paged"}, PageSize: 10}) {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("iterated %d after breaking at 3", n)
	}
}
