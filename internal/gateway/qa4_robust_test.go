package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/config"
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

// TestQA4CancelledResumedWatchesLeaveNoConsumers: watches resumed from a
// resourceVersion and cancelled by their clients as soon as they are
// established (a client that reconnects, a UI that navigates away) must not
// leave their catch-up consumers behind in JetStream. Each resumed watch
// creates a replay consumer; when the client cancels while that consumer is
// being created, the create call fails with the cancelled context, the
// consumer the server did create is never deleted and stays (three server
// goroutines and its state each) until its inactivity threshold of a minute.
// A client churning watches piles them up: 1,000 such watches left 1,000
// consumers and ~3,000 goroutines in a real gateway for a minute.
func TestQA4CancelledResumedWatchesLeaveNoConsumers(t *testing.T) {
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

// TestQA4ShutdownWithOpenEmitStream: a graceful stop (SIGTERM) while an
// EmitStream client is connected, its batches acknowledged, must end that
// stream (Unavailable, as watches are ended) and finish promptly. Instead the
// server waits for the emit stream to end by itself, which a long-lived
// emitter never does: every shutdown with one connected emitter runs into
// the shutdown timeout ("graceful stop timed out; closing connections") and
// then cuts every connection, so a batch stored in that moment is never
// acknowledged. Observed on the binary: SIGTERM with an EmitStream open
// exits after 15.6s (the 15s default timeout) instead of at once.
func TestQA4ShutdownWithOpenEmitStream(t *testing.T) {
	const timeout = 20 * time.Second
	tg, ctx := gatewayToStop(t, timeout)
	_, s := ackedEmitStream(t, ctx, tg, "p")
	// The emitter stays connected, as a long-lived emitter does.
	start := time.Now()
	stopped := make(chan struct{})
	go func() { tg.stop(); close(stopped) }()
	_, err := s.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("open emit stream ended with %v after %v, want Unavailable (shutting down)", err, time.Since(start).Round(time.Millisecond))
	}
	<-stopped
	if d := time.Since(start); d > timeout/3 {
		t.Fatalf("graceful stop with one idle emit stream open took %v (shutdown timeout %v): it waited for the stream instead of ending it", d.Round(time.Millisecond), timeout)
	}
}

// TestQA4PausedReplayingWatcherResumable: a watcher resumed from an old
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
func TestQA4PausedReplayingWatcherResumable(t *testing.T) {
	tg := startGateway(t, nil)
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
	// the server has removed its idle consumer (a minute of inactivity).
	for consumerCount(t, tg) > before {
		if ctx.Err() != nil {
			t.Fatal("the catch-up consumer was never removed")
		}
		time.Sleep(time.Second) // polling the stream's consumer count
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

// TestQA4ShutdownWithStalledWatcher: a graceful stop ends watches first
// ("watches end first, their clients reconnect elsewhere"), but a watch that
// is blocked sending to a client that stopped reading (live, or catching up
// from a resourceVersion) never sees the feed stop: every such shutdown
// runs into the shutdown timeout and then cuts every connection. Observed
// on the binary: SIGTERM with one stalled grpc watcher exits after 17 s
// (default 15 s timeout, "graceful stop timed out") instead of 2 s; a watch
// catching up from 0 over 900,000 events went on replaying all of them for
// 8 s after SIGTERM before it was ended.
func TestQA4ShutdownWithStalledWatcher(t *testing.T) {
	for _, from := range []string{"", "0"} {
		t.Run("resourceVersion="+from, func(t *testing.T) {
			const timeout = 20 * time.Second
			tg, ctx := gatewayToStop(t, timeout)
			conn, err := grpc.NewClient(tg.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			emitMany := func(prefix string) { emitBulk(t, tg, "Stall", prefix, 4000) }
			if from != "" {
				emitMany("old")
			}
			w, err := eventgatev1.NewEventServiceClient(conn).StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: from})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Header(); err != nil {
				t.Fatal(err)
			}
			if from != "" {
				recvN(t, w, 1) // catching up
			}
			emitMany("new") // the watcher stops reading: its sends block
			start := time.Now()
			tg.stop()
			if d := time.Since(start); d > timeout/3 {
				t.Fatalf("graceful stop with one stalled watcher took %v (shutdown timeout %v): the watch was not ended", d.Round(time.Millisecond), timeout)
			}
		})
	}
}

// TestShutdownWithReflectionStreamOpen: grpcurl keeps its reflection stream
// open for as long as it runs; an open one (beside an emit stream) must not
// hold the stop to its timeout either.
func TestShutdownWithReflectionStreamOpen(t *testing.T) {
	const timeout = 20 * time.Second
	tg, ctx := gatewayToStop(t, timeout)
	conn, es := ackedEmitStream(t, ctx, tg, "r")
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := refl.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tg.stop()
	if d := time.Since(start); d > timeout/3 {
		t.Fatalf("stop with a reflection stream open took %v (shutdown timeout %v)", d.Round(time.Millisecond), timeout)
	}
	if _, err := es.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the emit stream ended with %v, want Unavailable", err)
	}
}

// ackedEmitStream opens an emit stream on a connection of its own to tg
// (tg.stop closes tg.client's) and has one batch acknowledged on it.
func ackedEmitStream(t *testing.T, ctx context.Context, tg *testGateway, name string) (*grpc.ClientConn, grpc.BidiStreamingClient[eventgatev1.EmitStreamRequest, eventgatev1.EmitStreamResponse]) {
	t.Helper()
	conn, err := grpc.NewClient(tg.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := eventgatev1.NewEventServiceClient(conn).EmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&eventgatev1.EmitStreamRequest{BatchId: "1", Events: []*eventgatev1.Event{testEvent("Open", "Pod", "ns", name)}}); err != nil {
		t.Fatal(err)
	}
	if ack, err := s.Recv(); err != nil || ack.Error != nil {
		t.Fatalf("ack: %v %v", ack, err)
	}
	return conn, s
}

// emitBulk emits n events of kind Job named prefix0, prefix1, … in batches
// of 500, each with a 1 KB note: more than a client's flow-control windows
// hold, so that a watcher that does not read blocks its sends.
func emitBulk(t *testing.T, tg *testGateway, reason, prefix string, n int) {
	t.Helper()
	note := strings.Repeat("x", 1000)
	for i := 0; i < n; i += 500 {
		var evs []*eventgatev1.Event
		for j := i; j < min(i+500, n); j++ {
			e := testEvent(reason, "Job", "ns", fmt.Sprintf("%s%d", prefix, j))
			e.Note = note
			evs = append(evs, e)
		}
		emit(t, tg.client, evs...)
	}
}

// gatewayToStop starts a gateway with the shutdown timeout timeout, and a
// context for its clients that outlives its stop.
func gatewayToStop(t *testing.T, timeout time.Duration) (*testGateway, context.Context) {
	t.Helper()
	tg := startGatewayWith(t, t.TempDir(), func(c *config.Config) { c.ShutdownTimeout = timeout })
	t.Cleanup(tg.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	t.Cleanup(cancel)
	return tg, ctx
}
