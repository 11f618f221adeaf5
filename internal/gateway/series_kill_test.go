package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/natstest"
)

// latestVersions reads the events stream and returns the latest version of
// every stored event by uid.
func latestVersions(ctx context.Context, t *testing.T, url string) map[string]*eventgatev1.Event {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	defer nc.Close()
	s, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*eventgatev1.Event{}
	if info.State.Msgs == 0 {
		return out
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(0); seq < info.State.LastSeq; {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("reading the events stream at %d of %d: %v", seq, info.State.LastSeq, err)
		}
		meta, _ := msg.Metadata()
		seq = meta.Sequence.Stream
		ev, err := event.Unmarshal(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		out[ev.Uid] = ev
	}
	return out
}

// TestSeriesReplicaKilled runs two gateway processes on one NATS server,
// spreads 100 series' occurrences over both, kills one (SIGKILL) halfway and
// retries its unanswered batches on the other with the same idempotency key:
// every series still ends with the exact count.
func TestSeriesReplicaKilled(t *testing.T) {
	const series = 100
	per := seriesPerKey()
	ns := natstest.StartServer(t)
	bin := buildGateway(t)
	// The series must outlive the takeover gap (PinnedTTL 5s, plus Emits
	// waiting out the decision timeout meanwhile), as the 6-minute defaults do.
	flags := []string{"--nats-url", ns.ClientURL(), "--series-window", "15s", "--series-flush-interval", "1s",
		"--series-heartbeat", "5s", "--series-finish-after", "15s", "--intake-decision-timeout", "1s"}
	procs := []*gatewayProcess{startProcess(t, bin, t.TempDir(), flags...), startProcess(t, bin, t.TempDir(), flags...)}
	clients := make([]eventgatev1.EventServiceClient, 2)
	for i, p := range procs {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients[i] = eventgatev1.NewEventServiceClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			if err := procs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Error(err)
			}
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for k := 0; k < 2; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := k
			for r := 0; r < per; r++ {
				if k == 0 && r == per/2 {
					kill()
				}
				req := &eventgatev1.EmitRequest{IdempotencyKey: fmt.Sprintf("half-%d-round-%d", k, r)}
				for s := k; s < series; s += 2 {
					req.Events = append(req.Events, &eventgatev1.Event{Reason: "CrashLoop", Note: fmt.Sprintf("round %d", r),
						Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("pod-%d", s)}})
				}
				for {
					cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := clients[target].Emit(cctx, req)
					ccancel()
					if err == nil {
						break
					}
					if target == 1 || errors.Is(ctx.Err(), context.DeadlineExceeded) {
						errs <- fmt.Errorf("emit round %d: %w", r, err)
						return
					}
					target = 1 // the killed replica's callers retry on the other, same idempotency key
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for {
		latest := latestVersions(ctx, t, ns.ClientURL())
		finished := 0
		for _, ev := range latest {
			if ev.Series.GetState() == "Finished" {
				finished++
				if int(ev.Series.Count) != per {
					t.Fatalf("series of %s finished with count %d, want %d", ev.Regarding.Name, ev.Series.Count, per)
				}
			}
		}
		if len(latest) > series {
			t.Fatalf("%d stored events for %d series", len(latest), series)
		}
		if finished == series {
			t.Logf("%d series × %d occurrences, one replica killed halfway: every count exact", series, per)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d series finished", finished, series)
		case <-time.After(500 * time.Millisecond): // the survivor takes the dead replica's partitions over after PinnedTTL
		}
	}
}
