package gateway

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/gateway/config"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/natstest"
	"github.com/eventgate/eventgate/internal/watch"
)

// BenchmarkFanoutFloor takes BenchmarkWatchFanout apart: the same 1,000
// watchers with distinct filters over the same connections at the same rate,
// with the same events, through the building blocks alone, on a bare
// embedded JetStream server (no gateway, no series, no ClickHouse):
//
//   - nats: plain NATS subscriptions (the baseline of the fan-out target);
//   - grpc: the publisher hands each event to its watcher's gRPC stream;
//   - jetstream: published to JetStream and acknowledged, then read by one
//     ordered consumer, as the gateway's feed reads it;
//   - jetstream+hub: published to JetStream and acknowledged, then fanned out
//     by the gateway's feed (jetstream.Hub) to in-process watchers;
//   - jetstream+hub+grpc: the same, every watcher a gRPC stream.
//
// Each phase reports its delivery p99 and its ratio to the nats phase's.
func BenchmarkFanoutFloor(b *testing.B) {
	dur := benchSeconds()
	// The collector as the binary sets it, as in BenchmarkWatchFanout.
	TuneRuntime(config.Default(), slog.New(slog.DiscardHandler))
	srv := natstest.StartServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := config.Default().NATS
	nc, err := ejs.Connect(cfg, srv, "floor")
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := ejs.NewJetStream(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ejs.EnsureStream(ctx, js, cfg, nil); err != nil {
		b.Fatal(err)
	}
	hub, err := watch.Start(ctx, js, cfg.Stream, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer hub.Stop()

	// The events of BenchmarkWatchFanout, one object each, round robin
	// over the watchers' namespaces.
	note := strings.Repeat("n", 400)
	j := 0
	next := func(now *timestamppb.Timestamp) (string, []byte) {
		ns := "ns-" + strconv.Itoa(j%fanoutWatchers)
		name := "pod-" + strconv.Itoa(j)
		j++
		data, err := event.Marshal(&eventgatev1.Event{
			Uid: strconv.Itoa(j), Name: name + ".tick", Namespace: ns,
			Reason: "Tick", Note: note, EventTime: now, Type: "Normal",
			ReportingController: "bench", ReportingInstance: "bench-0", Action: "Bench",
			Tenant:    &eventgatev1.Tenant{Type: "project", Name: "bench"},
			Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: ns, Name: name},
		})
		if err != nil {
			b.Fatal(err)
		}
		return "events.project.bench.Pod." + ns + "." + name, data
	}
	// toJetStream publishes at the bench rate and waits for each batch's
	// acknowledgements, as Emit does.
	toJetStream := func() int {
		return pace(dur, func(n int) {
			now := timestamppb.Now()
			futs := make([]jetstream.PubAckFuture, 0, n)
			for range n {
				subj, data := next(now)
				f, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: data, Header: nats.Header{jetstream.MsgIDHeader: {strconv.Itoa(j)}}})
				if err != nil {
					b.Fatal(err)
				}
				futs = append(futs, f)
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
		})
	}

	var phases []*floorPhase
	run := func(name string, setup func(rec func() func(time.Duration)) (publish func() int, stop func())) {
		p := &floorPhase{name: name}
		publish, stop := setup(func() func(time.Duration) { return p.lat.recorder().add })
		c0, g0, t0 := cpuTime(), gcCycles(), time.Now()
		sent := publish()
		p.cpu, p.gcs = cpuPct(c0, t0), gcCycles()-g0
		// Wait for every delivery (bounded), then end the watchers.
		for deadline := time.Now().Add(30 * time.Second); p.lat.count() < sent && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if got := p.lat.count(); got != sent {
			b.Errorf("%s: sent %d, delivered %d", name, sent, got)
		}
		stop()
		phases = append(phases, p)
	}

	run("nats", func(rec func() func(time.Duration)) (func() int, func()) {
		var subs []*nats.Conn
		for range benchConns() {
			sc, err := ejs.Connect(cfg, srv, "floor-sub")
			if err != nil {
				b.Fatal(err)
			}
			subs = append(subs, sc)
		}
		for i := range fanoutWatchers {
			add := rec()
			if _, err := subs[i%len(subs)].Subscribe("plain."+strconv.Itoa(i), func(m *nats.Msg) {
				add(time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(m.Data)))))
			}); err != nil {
				b.Fatal(err)
			}
		}
		for _, sc := range subs {
			if err := sc.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		payload := make([]byte, 600)
		i := 0
		return func() int {
				return pace(dur, func(n int) {
					for range n {
						binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
						_ = nc.Publish("plain."+strconv.Itoa(i%fanoutWatchers), payload)
						i++
					}
				})
			}, func() {
				for _, sc := range subs {
					sc.Close()
				}
			}
	})

	run("grpc", func(rec func() func(time.Duration)) (func() int, func()) {
		direct := make(map[string]chan *eventgatev1.Event, fanoutWatchers)
		for i := range fanoutWatchers {
			direct["ns-"+strconv.Itoa(i)] = make(chan *eventgatev1.Event, 4096)
		}
		stop := serveFloor(b, &floorServer{direct: direct}, rec)
		return func() int {
			return pace(dur, func(n int) {
				now := timestamppb.Now()
				for range n {
					_, data := next(now)
					ev, err := event.Unmarshal(data) // as the feed decodes
					if err != nil {
						b.Fatal(err)
					}
					direct[ev.Namespace] <- ev
				}
			})
		}, stop
	})

	run("jetstream", func(rec func() func(time.Duration)) (func() int, func()) {
		// One ordered consumer reads the stream (as the hub's feed does)
		// and records every event itself: JetStream without the fan-out.
		st, err := js.Stream(ctx, cfg.Stream)
		if err != nil {
			b.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{ejs.SubjectsAll},
			DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:    info.State.LastSeq + 1,
		})
		if err != nil {
			b.Fatal(err)
		}
		add := rec()
		cc, err := cons.Consume(func(m jetstream.Msg) {
			ev, err := event.Unmarshal(m.Data())
			if err != nil {
				b.Error(err)
				return
			}
			add(time.Since(ev.EventTime.AsTime()))
		}, jetstream.PullMaxMessages(2048))
		if err != nil {
			b.Fatal(err)
		}
		return toJetStream, cc.Stop
	})

	run("jetstream+hub", func(rec func() func(time.Duration)) (func() int, func()) {
		wctx, wcancel := context.WithCancel(ctx)
		var wg, ready sync.WaitGroup
		for i := range fanoutWatchers {
			wg.Add(1)
			ready.Add(1)
			add := rec()
			go func() {
				defer wg.Done()
				_ = hub.Watch(wctx, event.WatchOptions{
					Subjects: []string{"events.project.bench.Pod.ns-" + strconv.Itoa(i) + ".*"},
					Buffer:   4096, Ready: ready.Done,
				}, func(it event.WatchItem) error {
					add(time.Since(it.Event.EventTime.AsTime()))
					return nil
				})
			}()
		}
		ready.Wait()
		return toJetStream, func() { wcancel(); wg.Wait() }
	})

	run("jetstream+hub+grpc", func(rec func() func(time.Duration)) (func() int, func()) {
		return toJetStream, serveFloor(b, &floorServer{hub: hub}, rec)
	})

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	base := ms(phases[0].lat.pct(0.99))
	var sum []string
	for _, p := range phases {
		p99 := ms(p.lat.pct(0.99))
		if p != phases[0] {
			b.ReportMetric(p99, p.name+"_p99_ms")
			b.ReportMetric(p99/max(base, 0.001), p.name+"_p99_ratio")
		} else {
			b.ReportMetric(p99, "nats_p99_ms")
		}
		sum = append(sum, fmt.Sprintf("%s p50 %v p99 %v (%.1fx; cpu %.0f%%, %d collections)",
			p.name, p.lat.pct(0.5), p.lat.pct(0.99), p99/max(base, 0.001), p.cpu, p.gcs))
	}
	b.Logf("%d watchers over %d connections, %s at %d events/s each phase: %s",
		fanoutWatchers, benchConns(), dur, benchRate(), strings.Join(sum, "; "))
}

type floorPhase struct {
	name string
	lat  latencies
	cpu  float64
	gcs  uint64
}

// floorServer serves StreamWatch from the hub or, without one, from a
// channel per namespace: nothing but the feed and gRPC.
type floorServer struct {
	eventgatev1.UnimplementedEventServiceServer
	hub    *watch.Hub
	direct map[string]chan *eventgatev1.Event
	ready  *sync.WaitGroup
}

func (f *floorServer) StreamWatch(req *eventgatev1.StreamWatchRequest, s grpc.ServerStreamingServer[eventgatev1.StreamWatchResponse]) error {
	ready := func() { _ = s.SendHeader(nil); f.ready.Done() }
	if f.direct != nil {
		ch := f.direct[req.Namespace]
		ready()
		for {
			select {
			case <-s.Context().Done():
				return nil
			case ev := <-ch:
				if err := s.Send(&eventgatev1.StreamWatchResponse{Type: "ADDED", Object: ev}); err != nil {
					return err
				}
			}
		}
	}
	return f.hub.Watch(s.Context(), event.WatchOptions{
		Subjects: []string{"events.project.bench.Pod." + req.Namespace + ".*"},
		Buffer:   4096, Ready: ready,
	}, func(it event.WatchItem) error {
		return s.Send(&eventgatev1.StreamWatchResponse{Type: "ADDED", Object: it.Event})
	})
}

// serveFloor serves fs on a gRPC server and opens the 1,000 watches over
// benchConns() connections, each recording its deliveries; stop ends them.
func serveFloor(b *testing.B, fs *floorServer, rec func() func(time.Duration)) (stop func()) {
	gs := grpc.NewServer()
	var ready sync.WaitGroup
	ready.Add(fanoutWatchers)
	fs.ready = &ready
	eventgatev1.RegisterEventServiceServer(gs, fs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(l) }()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var conns []*grpc.ClientConn
	for c := range benchConns() {
		conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, conn)
		client := eventgatev1.NewEventServiceClient(conn)
		for i := c; i < fanoutWatchers; i += benchConns() {
			s, err := client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Namespace: "ns-" + strconv.Itoa(i)})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Header(); err != nil {
				b.Fatal(err)
			}
			add := rec()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r, err := s.Recv()
					if err != nil {
						return
					}
					add(time.Since(r.Object.EventTime.AsTime()))
				}
			}()
		}
	}
	ready.Wait()
	return func() {
		cancel()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
		gs.Stop()
	}
}

func cpuPct(c0 time.Duration, t0 time.Time) float64 {
	return 100 * (cpuTime() - c0).Seconds() / time.Since(t0).Seconds()
}
