package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/ingest"
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
//   - jetstream+hub+grpc: the same, every watcher a gRPC stream;
//   - writepath+hub+grpc: the same, with what the gateway's write path
//     does for every event beside it on the same two cores
//     (writePathFloor: the intake's log and owner hops, and the store's
//     ingest into the embedded engine from the feed): the floor of the
//     fan-out on this machine, where the gateway's write path shares the
//     cores with its watches.
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
	// The events stream as the gateway configures it (its duplicate
	// window is the intake's replay window, not --stream-duplicates).
	if _, err := ejs.EnsureStream(ctx, js, eventsStreamConfig(config.Default()), nil); err != nil {
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
		return floorSubject(ns, name), data
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
		u0 := readUsage()
		sent := publish()
		p.use = u0.since()
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

	// The floor on two cores: the same, with the write path's parts
	// beside it, as in the gateway every event crosses them too.
	run("writepath+hub+grpc", func(rec func() func(time.Duration)) (func() int, func()) {
		wp := startWritePathFloor(b, ctx, srv, hub)
		stop := serveFloor(b, &floorServer{hub: hub}, rec)
		return func() int {
				return pace(dur, func(n int) {
					now := timestamppb.Now()
					raws := make([][]byte, n)
					for k := range raws {
						_, raws[k] = next(now)
					}
					wp.submit(raws)
				})
			}, func() {
				stop()
				wp.stop()
			}
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
		sum = append(sum, fmt.Sprintf("%s p50 %v p99 %v (%.1fx; %v)",
			p.name, p.lat.pct(0.5), p.lat.pct(0.99), p99/max(base, 0.001), p.use))
	}
	b.Logf("%d watchers over %d connections, %s at %d events/s each phase: %s",
		fanoutWatchers, benchConns(), dur, benchRate(), strings.Join(sum, "; "))
}

type floorPhase struct {
	name string
	lat  latencies
	use  used
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

// writePathFloor is what the gateway's write path does for every event
// besides the watch feed, with the gateway's parts and none of its logic
// (as bench.PipelineFloor, in this process): each batch logged in an
// intake stream as one entry per partition and acknowledged, an owner
// decoding each occurrence and writing it to the events stream (its acks
// pipelined), and the store's ingest inserting batches of the ingest's
// size and wait, taken from the watch feed, into the embedded engine
// through a Writer (the niced encoder, as the gateway's). The log and the
// owner have a connection each, as the gateway's paths.
type writePathFloor struct {
	b        *testing.B
	ctx      context.Context
	cancel   context.CancelFunc
	emit     jetstream.JetStream
	conns    []*nats.Conn
	wg       sync.WaitGroup
	entry    int
	inserted atomic.Int64
}

const writePathPartitions = 8

// floorSubject is the subject the floor's phases store an event at (one
// per object; the watchers filter by namespace).
func floorSubject(ns, name string) string { return "events.project.bench.Pod." + ns + "." + name }

func startWritePathFloor(b *testing.B, ctx context.Context, srv *server.Server, hub *watch.Hub) *writePathFloor {
	ctx, cancel := context.WithCancel(ctx)
	wp := &writePathFloor{b: b, ctx: ctx, cancel: cancel}
	path := func(name string) jetstream.JetStream {
		nc, err := ejs.Connect(config.Default().NATS, srv, "floor-"+name)
		if err != nil {
			b.Fatal(err)
		}
		wp.conns = append(wp.conns, nc)
		js, err := ejs.NewJetStream(nc)
		if err != nil {
			b.Fatal(err)
		}
		return js
	}
	wp.emit = path("emit")
	ownerJS := path("owner")
	intake, err := wp.emit.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "FLOOR_INTAKE", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	chcfg := clickhouse.DefaultConfig()
	chcfg.DataDir, chcfg.Database = chDir, databaseFor(b.TempDir())
	st, err := clickhouse.Open(ctx, chcfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	w, err := st.NewWriter()
	if err != nil {
		b.Fatal(err)
	}
	wp.wg.Add(2)
	go func() {
		defer wp.wg.Done()
		wp.owner(intake, ownerJS)
	}()
	go func() {
		defer wp.wg.Done()
		defer func() {
			w.Close()
			_ = st.Close()
		}()
		wp.ingest(hub, w, chcfg.BatchSize, chcfg.BatchWait)
	}()
	return wp
}

// submit logs one batch, an entry per partition holding its occurrences,
// and waits for the entries' acknowledgements (as the intake's log).
func (wp *writePathFloor) submit(raws [][]byte) {
	var entries [writePathPartitions]*nats.Msg
	for i, raw := range raws {
		p := i % writePathPartitions
		if entries[p] == nil {
			entries[p] = &nats.Msg{Subject: "floor." + strconv.Itoa(p), Header: nats.Header{}}
		}
		entries[p].Data = protowire.AppendBytes(entries[p].Data, raw)
	}
	var futs []jetstream.PubAckFuture
	for _, m := range entries {
		if m == nil {
			continue
		}
		wp.entry++
		m.Header[jetstream.MsgIDHeader] = []string{"e-" + strconv.Itoa(wp.entry)}
		f, err := wp.emit.PublishMsgAsync(m)
		if err != nil {
			wp.b.Fatal(err)
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			wp.b.Fatal(err)
		}
	}
}

// owner writes every logged occurrence to the events stream, decoded
// first (as an owner decodes it to fold it), its acks awaited in order by
// another goroutine.
func (wp *writePathFloor) owner(intake jetstream.Stream, js jetstream.JetStream) {
	cons, err := intake.OrderedConsumer(wp.ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		wp.b.Error(err)
		return
	}
	it, err := cons.Messages()
	if err != nil {
		wp.b.Error(err)
		return
	}
	defer context.AfterFunc(wp.ctx, it.Stop)()
	acks := make(chan jetstream.PubAckFuture, 4096)
	defer close(acks)
	go func() {
		for f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				if wp.ctx.Err() == nil {
					wp.b.Error(err)
				}
			}
		}
	}()
	for {
		m, err := it.Next()
		if err != nil {
			return
		}
		md, _ := m.Metadata()
		data := m.Data()
		for k := 0; len(data) > 0; k++ {
			raw, n := protowire.ConsumeBytes(data)
			if n < 0 {
				wp.b.Error("truncated entry")
				return
			}
			data = data[n:]
			ev, err := event.Unmarshal(raw)
			if err != nil {
				wp.b.Error(err)
				return
			}
			out := &nats.Msg{Subject: floorSubject(ev.Namespace, ev.Regarding.GetName()), Data: raw, Header: nats.Header{
				jetstream.MsgIDHeader: {"w-" + strconv.FormatUint(md.Sequence.Stream, 10) + "." + strconv.Itoa(k)},
			}}
			f, err := js.PublishMsgAsync(out)
			for stalls := 0; errors.Is(err, jetstream.ErrTooManyStalledMsgs) && stalls < 1000; stalls++ {
				f, err = js.PublishMsgAsync(out)
			}
			if err != nil {
				if wp.ctx.Err() == nil {
					wp.b.Error(err)
				}
				return
			}
			acks <- f
		}
	}
}

// ingest inserts what the watch feed dispatches (a tap on the hub, as
// the gateway's own store is filled), in batches of up to size or what
// came within wait of a batch's first event, undecoded (the Writer decodes
// them on its thread, as the gateway's ingest leaves it to), while the
// next batch fills.
func (wp *writePathFloor) ingest(hub *watch.Hub, w *clickhouse.Writer, size int, wait time.Duration) {
	tap, _, err := hub.Tap(max(ingest.DefaultTapBuffer, 2*size))
	if err != nil {
		wp.b.Error(err)
		return
	}
	defer tap.Close()
	batches := make(chan []event.Stored, 1)
	inserting := make(chan struct{})
	defer func() { <-inserting }()
	go func() {
		defer close(inserting)
		for rows := range batches {
			if err := w.Insert(wp.ctx, rows); err != nil {
				if wp.ctx.Err() == nil {
					wp.b.Error(err)
				}
			}
			wp.inserted.Add(int64(len(rows)))
		}
	}()
	defer close(batches)
	var rows []event.Stored
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		timer.Stop()
		if len(rows) > 0 {
			select {
			case batches <- rows:
			case <-wp.ctx.Done():
			}
			rows = nil
		}
	}
	for {
		select {
		case <-wp.ctx.Done():
			return
		case <-tap.Overflow():
			wp.b.Error("write path floor: the ingest's tap overflowed")
			return
		case <-timer.C:
			flush()
		case <-tap.Ready():
			items := tap.Take()
			for _, it := range items {
				if len(rows) == 0 {
					timer.Reset(wait)
				}
				rows = append(rows, event.Stored{Seq: it.Seq, Subject: it.Subject, StoredAt: it.Stored, Raw: it.Raw, WriteReason: "created"})
				if len(rows) >= size {
					flush()
				}
			}
			tap.Recycle(items)
		}
	}
}

// stop ends the parts and reports what the engine took.
func (wp *writePathFloor) stop() {
	wp.cancel()
	wp.wg.Wait()
	for _, nc := range wp.conns {
		nc.Close()
	}
	wp.b.Logf("write path floor: %d events inserted", wp.inserted.Load())
}
