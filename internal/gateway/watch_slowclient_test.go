package gateway

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// consumerCount is the number of consumers on the events stream.
func consumerCount(t *testing.T, tg *testGateway) int {
	t.Helper()
	s, err := tg.js.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// TestCancelledResumedWatchesLeaveNoConsumers: watches resumed from a
// resourceVersion and cancelled by their clients as soon as they are
// established (a client that reconnects, a UI that navigates away) must not
// leave their catch-up consumers behind in JetStream. Each resumed watch
// creates a replay consumer; when the client cancels while that consumer is
// being created, the create call fails with the cancelled context, the
// consumer the server did create is never deleted and stays (three server
// goroutines and its state each) until its inactivity threshold of a minute.
// A client churning watches piles them up: 1,000 such watches left 1,000
// consumers and ~3,000 goroutines in a real gateway for a minute.
func TestCancelledResumedWatchesLeaveNoConsumers(t *testing.T) {
	tg := startGateway(t, nil)
	var evs []*eventgatev1.Event
	for i := 0; i < 50; i++ {
		evs = append(evs, testEvent("Churn", "Pod", "ns", fmt.Sprintf("p%d", i)))
	}
	emit(t, tg.client, evs...)
	before := consumerCount(t, tg)

	const watches = 200
	var wg sync.WaitGroup
	for i := 0; i < watches; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "0"})
			if err != nil {
				t.Errorf("StreamWatch: %v", err)
				return
			}
			if _, err := w.Header(); err != nil { // established; the client goes away
				t.Errorf("Header: %v", err)
			}
		}()
	}
	wg.Wait()

	// Every watch has ended; its consumer must go with it, not a minute later.
	deadline := time.Now().Add(15 * time.Second)
	for {
		n := consumerCount(t, tg)
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after %d resumed watches were cancelled the events stream still has %d consumers (%d before them): their replay consumers were left behind", watches, n, before)
		}
		time.Sleep(100 * time.Millisecond) // polling the stream's consumer count
	}
}

// TestPausedReplayingWatcherResumable: a watcher resumed from an old
// resourceVersion that stops reading for a while during its catch-up (a
// client busy processing, a debugger, a stalled consumer) must, when it reads
// again, either get the rest or be ended with an error naming the
// resourceVersion to resume from, as any slow watcher is. Instead the
// catch-up's JetStream consumer (InactiveThreshold one minute) is deleted by
// the server while the watch is blocked sending to the client; the next
// fetch fails ("nats: no responders available for request") and the watch
// ends with Internal "internal error", no resourceVersion: the client cannot
// resume and must list again. Observed on the binary with grpc: watch from 0
// over 900,000 events, read 10, pause 75 s: 1,014 more events, then Internal.
// The gateway here lets a catch-up's consumer idle for 3 s, not the default
// minute (--watch-replay-idle), so that the pause is short.
func TestPausedReplayingWatcherResumable(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.WatchReplayIdle = 3 * time.Second })
	const total = 8000
	emitBulk(t, tg, "Replay", "j", total)
	before := consumerCount(t, tg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	got := recvN(t, w, 10)
	last, _ := strconv.ParseUint(got[9].Object.ResourceVersion, 10, 64)
	if n := consumerCount(t, tg); n <= before {
		t.Fatalf("the catch-up has no consumer of its own (%d consumers, %d before)", n, before)
	}
	// The client pauses; the catch-up is blocked sending to it. Wait until
	// the server has removed its idle consumer (3 s of inactivity).
	for consumerCount(t, tg) > before {
		if ctx.Err() != nil {
			t.Fatal("the catch-up consumer was never removed")
		}
		time.Sleep(200 * time.Millisecond) // polling the stream's consumer count
	}
	// The client reads again.
	for last < total {
		r, err := w.Recv()
		if err != nil {
			st := status.Convert(err)
			var resume string
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					resume = ei.Metadata["resourceVersion"]
				}
			}
			if resume == "" {
				t.Fatalf("after a pause the catch-up watch ended at resourceVersion %d with %v and no resourceVersion to resume from", last, err)
			}
			if resume != strconv.FormatUint(last, 10) {
				t.Fatalf("watch ended with %v, resume from %s, but the last event received was %d", err, resume, last)
			}
			return
		}
		if r.Type == "BOOKMARK" {
			continue
		}
		seq, _ := strconv.ParseUint(r.Object.ResourceVersion, 10, 64)
		if seq != last+1 {
			t.Fatalf("after %d got %d: gap or duplicate", last, seq)
		}
		last = seq
	}
}
