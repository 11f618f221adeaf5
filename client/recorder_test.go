package client_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/client"
	"github.com/eventgate/eventgate/internal/gateway/gatewaytest"
)

func pod(ns, name string) *client.ObjectReference {
	return &client.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: ns, Name: name}
}

// TestRecorderEventfStoresEvents: Eventf, Flush, and every event is stored
// as recorded, with the recorder's reporting controller.
func TestRecorderEventfStoresEvents(t *testing.T) {
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", nil)
	c := newClient(t, g.GRPCAddr)
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
	lat := newLatencies(t)
	for i := range 1000 {
		lat.measure(func() { rec.Eventf(pod("shop", "web"), nil, client.TypeNormal, "Tick", "Tick", "tick %d", i) })
	}
	lat.release()
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
	l := gatewaytest.Listen(t, "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRecorderRateLimitsPerObject: a burst per object, then drops, while
// another object is unaffected.
func TestRecorderRateLimitsPerObject(t *testing.T) {
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", nil)
	c := newClient(t, g.GRPCAddr)
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
	c := newClient(t, g.GRPCAddr)
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

// latencies measure Eventf. Wall time alone cannot say whether a call
// was blocked: on a loaded machine the scheduler, or a garbage collection
// pause, can hold up any call. What would make Eventf wait for the
// gateway is a channel or a lock, and Go's block profile records every
// wait on those, with its stack: the check is that the calls spent at most
// 1ms in all waiting (none is expected).
type latencies struct {
	wall []time.Duration
}

// newLatencies turns on the block profile for every blocking event;
// release turns it off.
func newLatencies(t *testing.T) *latencies {
	t.Helper()
	runtime.SetBlockProfileRate(1)
	return &latencies{}
}

func (l *latencies) release() { runtime.SetBlockProfileRate(0) }

// measure runs f and notes how long it took.
func (l *latencies) measure(f func()) {
	start := time.Now()
	f()
	l.wall = append(l.wall, time.Since(start))
}

func (l *latencies) check(t *testing.T) {
	t.Helper()
	wall := slices.Clone(l.wall)
	slices.Sort(wall)
	n := len(wall)
	blocked := blockedIn(t, "client.(*Recorder).Record")
	t.Logf("Eventf over %d calls: wall median %s, p99.9 %s, max %s (scheduling and GC included); blocked on channels or locks: %s in all",
		n, wall[n/2], wall[n*999/1000], wall[n-1], blocked)
	if blocked > time.Millisecond {
		t.Errorf("Eventf was blocked for %s in all (want at most 1ms)", blocked)
	}
}

// blockedIn sums the block profile's delays whose stacks pass through fn.
func blockedIn(t *testing.T, fn string) time.Duration {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("block").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	var (
		perSecond float64
		total     float64
		cycles    float64
		inFn      bool
	)
	flush := func() {
		if inFn {
			total += cycles
		}
		cycles, inFn = 0, false
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "cycles/second="):
			perSecond, _ = strconv.ParseFloat(strings.TrimPrefix(line, "cycles/second="), 64)
		case strings.Contains(line, " @ "):
			flush()
			cycles, _ = strconv.ParseFloat(strings.Fields(line)[0], 64)
		case strings.Contains(line, fn):
			inFn = true
		}
	}
	flush()
	if perSecond == 0 {
		t.Fatal("block profile without cycles/second")
	}
	return time.Duration(total / perSecond * float64(time.Second))
}

// TestBlockProfileSeesABlockedCall checks the measurement itself: a call
// that waits on a channel shows in blockedIn, under its own name.
func TestBlockProfileSeesABlockedCall(t *testing.T) {
	lat := newLatencies(t)
	ch := make(chan struct{})
	go func() {
		time.Sleep(5 * time.Millisecond) // the wait being measured
		close(ch)
	}()
	waitOn(ch)
	lat.release()
	if d := blockedIn(t, "client_test.waitOn"); d < 4*time.Millisecond {
		t.Errorf("a 5ms channel wait shows as %s blocked", d)
	}
}

//go:noinline
func waitOn(ch chan struct{}) { <-ch }
