package client_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/client"
)

func pod(ns, name string) *client.ObjectReference {
	return &client.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: ns, Name: name}
}

// TestRecorderEventfStoresEvents: Eventf, Flush, and every event is stored
// as recorded, with the recorder's reporting controller.
func TestRecorderEventfStoresEvents(t *testing.T) {
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", nil)
	c := newClient(t, g.grpcAddr)
	var mu sync.Mutex
	stored := map[string]*client.EmitResult{}
	rec := c.NewRecorder(client.RecorderOptions{
		ReportingController: "example.com/sdk-test", ReportingInstance: "sdk-test-1",
		Metrics: client.Metrics{OnStored: func(ev *client.Event, r *client.EmitResult) {
			mu.Lock()
			stored[ev.Uid] = r
			mu.Unlock()
		}},
	})
	for i := range 25 {
		rec.Eventf(pod("shop", fmt.Sprintf("web-%d", i)), nil, client.TypeNormal, "Started", "Start", "container %d started", i)
	}
	rec.Eventf(pod("shop", "web-0"), pod("shop", "db-0"), client.TypeWarning, "BackOff", "Restart", "back-off restarting")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := rec.Stats(); s.Queued != 26 || s.Stored != 26 || len(s.Dropped) != 0 {
		t.Fatalf("stats %+v, want 26 queued and stored, none dropped", s)
	}
	eventually(t, 20*time.Second, "events queryable", func() (bool, string) {
		evs := queryAll(t, ctx, c, &client.QueryRequest{ReportingController: []string{"example.com/sdk-test"}})
		return len(evs) == 26, fmt.Sprintf("%d of 26", len(evs))
	})
	ev, err := c.Get(ctx, &client.GetRequest{Uid: findUID(t, stored, "BackOff", c, ctx)})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Note != "back-off restarting" || ev.Type != client.TypeWarning || ev.Related.GetName() != "db-0" || ev.ReportingInstance != "sdk-test-1" || ev.Namespace != "shop" {
		t.Errorf("stored event %v", ev)
	}
}

func findUID(t *testing.T, stored map[string]*client.EmitResult, reason string, c *client.Client, ctx context.Context) string {
	t.Helper()
	for _, ev := range queryAll(t, ctx, c, &client.QueryRequest{Reason: []string{reason}}) {
		if _, ok := stored[ev.Uid]; ok {
			return ev.Uid
		}
	}
	t.Fatalf("no stored %s event", reason)
	return ""
}

// TestRecorderQueueFullDropsWithoutBlocking: with no gateway at all,
// Eventf returns at once, and what does not fit in the queue is dropped
// and counted; Close within its deadline drops the rest.
func TestRecorderQueueFullDropsWithoutBlocking(t *testing.T) {
	c := newClient(t, listenAndClose(t))
	var drops sync.Map
	rec := c.NewRecorder(client.RecorderOptions{QueueSize: 100, Metrics: client.Metrics{OnDrop: func(ev *client.Event, r client.DropReason) {
		drops.Store(ev.Uid, r)
	}}})
	var lat latencies
	for i := range 1000 {
		start := time.Now()
		rec.Eventf(pod("shop", "web"), nil, client.TypeNormal, "Tick", "Tick", "tick %d", i)
		lat.add(time.Since(start))
	}
	lat.check(t)
	s := rec.Stats()
	if s.Queued+s.Dropped[client.DropQueueFull] != 1000 || s.Dropped[client.DropQueueFull] < 900 {
		t.Fatalf("stats %+v: want the 1000 events queued or dropped as QueueFull, at least 900 dropped", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := rec.Close(ctx); err == nil {
		t.Fatal("Close with the gateway away: no error")
	}
	s = rec.Stats()
	if s.Dropped[client.DropQueueFull]+s.Dropped[client.DropClosed] != 1000 || s.Stored != 0 {
		t.Fatalf("stats after Close %+v: want every event dropped", s)
	}
	n := 0
	drops.Range(func(any, any) bool { n++; return true })
	if n != 1000 {
		t.Errorf("OnDrop reported %d events, want 1000", n)
	}
	rec.Eventf(pod("shop", "web"), nil, client.TypeNormal, "Tick", "Tick", "after close")
	if got := rec.Stats().Dropped[client.DropClosed]; got != s.Dropped[client.DropClosed]+1 {
		t.Errorf("Eventf after Close: DropClosed %d, want %d", got, s.Dropped[client.DropClosed]+1)
	}
}

// listenAndClose returns a loopback address nothing listens on.
func listenAndClose(t *testing.T) string {
	l := listen(t, "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRecorderRateLimitsPerObject: a burst per object, then drops, while
// another object is unaffected.
func TestRecorderRateLimitsPerObject(t *testing.T) {
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", nil)
	c := newClient(t, g.grpcAddr)
	rec := c.NewRecorder(client.RecorderOptions{ReportingController: "example.com/rate", PerObjectBurst: 5, PerObjectInterval: time.Hour})
	for i := range 20 {
		rec.Eventf(pod("shop", "noisy"), nil, client.TypeWarning, "Failed", "Sync", "failure %d", i)
	}
	for i := range 3 {
		rec.Eventf(pod("shop", "quiet"), nil, client.TypeNormal, "Synced", "Sync", "ok %d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := rec.Stats(); s.Stored != 8 || s.Dropped[client.DropRateLimited] != 15 {
		t.Fatalf("stats %+v: want 8 stored (5 noisy, 3 quiet) and 15 rate-limited", s)
	}
}

// TestRecorderDropsInvalidEventsKeepsTheRest: the gateway refuses a batch
// with an invalid event; the recorder drops that one (reported as
// Invalid) and stores the rest of the batch.
func TestRecorderDropsInvalidEventsKeepsTheRest(t *testing.T) {
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", nil)
	c := newClient(t, g.grpcAddr)
	var invalid []string
	rec := c.NewRecorder(client.RecorderOptions{ReportingController: "example.com/invalid", BatchWait: time.Second, Metrics: client.Metrics{
		OnDrop: func(ev *client.Event, r client.DropReason) { invalid = append(invalid, string(r)+":"+ev.Note) },
	}})
	rec.Eventf(pod("shop", "a"), nil, client.TypeNormal, "Fine", "Do", "first")
	rec.Eventf(pod("shop", "b"), nil, "NotAType", "Fine", "Do", "bad type")
	rec.Eventf(pod("shop", "c"), nil, client.TypeNormal, "Fine", "Do", "third")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := rec.Stats(); s.Stored != 2 || s.Dropped[client.DropInvalid] != 1 {
		t.Fatalf("stats %+v: want 2 stored, 1 invalid", s)
	}
	if len(invalid) != 1 || invalid[0] != "Invalid:bad type" {
		t.Errorf("dropped %v", invalid)
	}
}

// latencies are Eventf's durations. Eventf takes no lock a sender holds and
// never waits on a channel, so it is not blocked by the gateway; on a
// loaded machine the scheduler can still preempt any call, so the check
// is that at most one call in a thousand took over 1ms, and the worst at
// most 50ms (a wait for the gateway would be seconds).
type latencies []time.Duration

func (l *latencies) add(d time.Duration) { *l = append(*l, d) }

func (l latencies) check(t *testing.T) {
	t.Helper()
	s := slices.Clone(l)
	slices.Sort(s)
	p999, worst := s[len(s)*999/1000], s[len(s)-1]
	over := len(s) - sort.Search(len(s), func(i int) bool { return s[i] > time.Millisecond })
	t.Logf("Eventf over %d calls: median %s, p99.9 %s, max %s, %d over 1ms", len(s), s[len(s)/2], p999, worst, over)
	if over > max(1, len(s)/1000) || worst > 50*time.Millisecond {
		t.Errorf("Eventf blocked: %d calls over 1ms (want at most 1 in 1000), max %s (want <= 50ms)", over, worst)
	}
}
