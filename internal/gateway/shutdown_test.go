package gateway

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
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

// TestShutdownWithOpenEmitStream: a graceful stop (SIGTERM) while an
// EmitStream client is connected, its batches acknowledged, must end that
// stream (Unavailable, as watches are ended) and finish promptly. Instead the
// server waits for the emit stream to end by itself, which a long-lived
// emitter never does: every shutdown with one connected emitter runs into
// the shutdown timeout ("graceful stop timed out; closing connections") and
// then cuts every connection, so a batch stored in that moment is never
// acknowledged. Observed on the binary: SIGTERM with an EmitStream open
// exits after 15.6s (the 15s default timeout) instead of at once.
func TestShutdownWithOpenEmitStream(t *testing.T) {
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

// TestShutdownWithStalledWatcher: a graceful stop ends watches first
// ("watches end first, their clients reconnect elsewhere"), but a watch that
// is blocked sending to a client that stopped reading (live, or catching up
// from a resourceVersion) never sees the feed stop: every such shutdown
// runs into the shutdown timeout and then cuts every connection. Observed
// on the binary: SIGTERM with one stalled grpc watcher exits after 17 s
// (default 15 s timeout, "graceful stop timed out") instead of 2 s; a watch
// catching up from 0 over 900,000 events went on replaying all of them for
// 8 s after SIGTERM before it was ended.
func TestShutdownWithStalledWatcher(t *testing.T) {
	for _, from := range []string{"", "0"} {
		t.Run("resourceVersion="+from, func(t *testing.T) {
			const timeout = 20 * time.Second
			tg, ctx := gatewayToStop(t, timeout)
			conn, err := grpc.NewClient(tg.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			emitMany := func(prefix string) string { return emitBulk(t, tg, "Stall", prefix, 4000) }
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
			last := emitMany("new") // the watcher stops reading: its sends block
			// The stop also finishes the ClickHouse ingest's batches, which
			// on a loaded machine (the race detector, packages tested side
			// by side) takes seconds of its own: it is caught up first, so
			// that what is timed is the watch's end.
			waitIngested(t, tg, last)
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
