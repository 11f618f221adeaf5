package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/gateway"
	"github.com/eventgate/eventgate/internal/gateway/config"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// The write path's floor.
//
// The raw baselines measure each part alone, each with the whole machine.
// An accepted event crosses all of them on the same cores: it is logged in
// the intake stream, fetched by its partition's owner, decoded and written
// to the events stream, then decoded twice more, by the watch feed and by
// the ClickHouse ingest, which inserts it. PipelineFloor runs exactly those
// steps with the gateway's parts and none of its own logic (no gRPC, no
// validation, no series, no checkpoints), in one process as the gateway
// does, and reports how many events per second reach the engine. Nothing
// the gateway adds can make it faster than that, so its end-to-end rate
// over this one is how close it gets to what its design allows here.

// floorPartitions is the number of intake subjects (the gateway's default
// partition count).
const floorPartitions = 8

// PipelineFloor publishes total distinct workload events through the
// composed parts on a fresh embedded server and engine under dir, as fast
// as they take them, and returns the events per second from the first
// publish until the engine holds the last. It loads libchdb.so, so the
// runner calls it in a child process.
//
// It also reports the memory the parts alone hold at that rate, with the
// gateway's garbage collector settings: the process's peak RSS and its Go
// heap in use when the last event reached the engine (as the gateway's is
// read after a phase). The gateway holds at least that much at the same
// rate: the embedded server's caches of recent blocks and duplicate ids,
// the engine's.
func PipelineFloor(ctx context.Context, dir, lib string, total int) (FloorRun, error) {
	gateway.TuneRuntime(config.Default(), slog.New(slog.DiscardHandler))
	run, err := runFloor(ctx, dir, lib, total, 0)
	if err != nil {
		return FloorRun{}, err
	}
	return FloorRun{Rate: run.Rate, HeapInuseMiB: run.heapMiB, PeakRSSMiB: run.peakRSSMiB}, nil
}

// FloorRun is a run of the composed parts as fast as they take events.
type FloorRun struct {
	Rate         float64 `json:"rate"` // events/s
	HeapInuseMiB float64 `json:"heapInuseMiB"`
	PeakRSSMiB   float64 `json:"peakRSSMiB"`
}

// FloorLatency is a paced run of the composed parts: the latency an event
// has with the parts alone at a given rate, which bounds what the gateway
// can answer at that rate on this machine.
type FloorLatency struct {
	Rate int `json:"rate"` // offered events/s
	// Ack, per batch (one every Tick, as the latency phase sends them), in
	// ms: from its publish to the intake until the events stream
	// acknowledged the write of each of its events; what an Emit's ack
	// waits for at least.
	Ack []float64 `json:"ack"`
	// Watch, per event, in ms: from its publish until the watch feed
	// decoded it.
	Watch []float64 `json:"watch"`
	// Queryable, per batch, in ms: from its publish until the engine's
	// insert of its last event returned (the ingest inserts in stream
	// order, so every earlier event is in the engine then too); what an
	// emit→queryable waits for at least.
	Queryable []float64 `json:"queryable"`
	// Batches published: one a Tick while the machine keeps up, fewer and
	// larger when ticks are missed.
	Batches int `json:"batches"`
	// CPUPer1000 is the process's CPU time (user and system, every thread:
	// the publisher, the embedded server, the engine) from the first
	// publish until the engine held the last event, per 1,000 events, ms.
	CPUPer1000 float64 `json:"cpuPer1000"`
}

// PipelineFloorPaced offers rate events/s to the composed parts for d, in a
// batch every Tick that is logged as one intake entry per partition (as
// the intake logs a Submit), and measures each batch's acknowledgement and
// each event's arrival at the watch feed. The engine ingests all along, as
// the gateway's does. It loads libchdb.so: call it in a child process.
func PipelineFloorPaced(ctx context.Context, dir, lib string, rate int, d time.Duration) (*FloorLatency, error) {
	total := int(float64(rate) * d.Seconds())
	if rate <= 0 || total <= 0 {
		return nil, fmt.Errorf("pipeline floor: rate %d for %v is no load", rate, d)
	}
	run, err := runFloor(ctx, dir, lib, total, rate)
	if err != nil {
		return nil, err
	}
	return &FloorLatency{Rate: rate, Ack: run.ack, Watch: run.watch, Queryable: run.queryable, Batches: run.batches,
		CPUPer1000: run.cpu.Seconds() * 1000 / (float64(total) / 1000)}, nil
}

// Headers of the floor's messages: when the event's batch was published
// (unix ns), and the batch's number.
const (
	floorSentHeader  = "Floor-Sent"
	floorBatchHeader = "Floor-Batch"
)

type floorRun struct {
	Rate                float64
	ack, watch          []float64
	queryable           []float64
	batches             int
	heapMiB, peakRSSMiB float64       // when the last event reached the engine
	cpu                 time.Duration // the process's, over the run
}

// floorTimes gathers a paced run's latencies.
type floorTimes struct {
	mu       sync.Mutex
	acks     batchClock // each write acknowledged by the events stream
	inserts  batchClock // each event inserted into the engine
	watchs   []float64
	expected int // batches
}

func newFloorTimes(batches int) *floorTimes {
	return &floorTimes{expected: batches, acks: newBatchClock(batches), inserts: newBatchClock(batches)}
}

// batchClock times batches until each of their events passed a point:
// per batch, the latest of its events so far and how many are left.
type batchClock struct {
	latest []time.Duration
	left   []int
	done   []float64 // ms, per batch that has none left
}

func newBatchClock(n int) batchClock {
	return batchClock{latest: make([]time.Duration, n), left: make([]int, n)}
}

// passed records an event of batch b that took d to get there.
func (c *batchClock) passed(b int, d time.Duration) {
	if b < 0 || b >= len(c.latest) {
		return
	}
	c.latest[b] = max(c.latest[b], d)
	if c.left[b]--; c.left[b] == 0 {
		c.done = append(c.done, float64(c.latest[b])/float64(time.Millisecond))
	}
}

func (ft *floorTimes) acked(h nats.Header, now time.Time) {
	if ft == nil {
		return
	}
	sent, b, ok := floorStamp(h)
	if !ok {
		return
	}
	ft.mu.Lock()
	ft.acks.passed(b, now.Sub(sent))
	ft.mu.Unlock()
}

// inserted records that the engine holds an event of batch b sent at
// sent.
func (ft *floorTimes) inserted(sent time.Time, b int, now time.Time) {
	if ft == nil {
		return
	}
	ft.mu.Lock()
	ft.inserts.passed(b, now.Sub(sent))
	ft.mu.Unlock()
}

func (ft *floorTimes) watched(h nats.Header, now time.Time) {
	if ft == nil {
		return
	}
	if sent, _, ok := floorStamp(h); ok {
		ft.mu.Lock()
		ft.watchs = append(ft.watchs, float64(now.Sub(sent))/float64(time.Millisecond))
		ft.mu.Unlock()
	}
}

func floorStamp(h nats.Header) (time.Time, int, bool) {
	ns, err1 := strconv.ParseInt(h.Get(floorSentHeader), 10, 64)
	b, err2 := strconv.Atoi(h.Get(floorBatchHeader))
	if err1 != nil || err2 != nil || b < 0 {
		return time.Time{}, 0, false
	}
	return time.Unix(0, ns), b, true
}

// runFloor passes total events through the parts: as fast as they go
// (rate 0, one intake entry per event), or paced at rate events/s. It is
// one pipeline on purpose: its stages (emit, owner, feed, ingest) run as
// goroutines that share the run's connections, channels and clocks, and
// read top to bottom in the order an event passes them.
func runFloor(ctx context.Context, dir, lib string, total, rate int) (*floorRun, error) {
	ns, err := ejs.Embedded(dir+"/nats", "")
	if err != nil {
		return nil, err
	}
	defer ns.Shutdown()
	cfg := clickhouse.DefaultConfig()
	cfg.DataDir, cfg.ChDBLib = dir+"/clickhouse", lib
	st, err := clickhouse.Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer st.Close()

	// One connection per path, as the gateway has.
	conn := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := ejs.Connect(ejs.DefaultConfig(), ns, "floor-"+name)
		if err != nil {
			return nil, nil, err
		}
		js, err := ejs.NewJetStream(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return nc, js, nil
	}
	var js [4]jetstream.JetStream // emit, owner, feed, ingest
	for i, name := range []string{"emit", "owner", "feed", "ingest"} {
		nc, j, err := conn(name)
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		js[i] = j
	}
	// As the gateway does: on a small disk the stream's limit is lowered.
	scfg, _, _ := ejs.FitMaxBytes(ctx, js[0], ns, ejs.DefaultConfig())
	events, err := ejs.EnsureStream(ctx, js[0], scfg, nil)
	if err != nil {
		return nil, err
	}
	intake, err := js[0].CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "FLOOR_INTAKE", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute, AllowDirect: true,
	})
	if err != nil {
		return nil, fmt.Errorf("intake stream: %w", err)
	}

	_, raws, err := normalized(min(total, 20_000), "floor")
	if err != nil {
		return nil, err
	}
	var times *floorTimes
	if rate > 0 {
		n := (total+rate-1)/rate*int(time.Second/Tick) + 1
		times = newFloorTimes(n)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var inserted atomic.Int64
	done := make(chan struct{})
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			cancel(err)
		}
	}

	// The owners: one ordered pass over the intake, each occurrence decoded
	// and written to the events stream, acknowledged once stored.
	wg.Add(1)
	go func() {
		defer wg.Done()
		fail(floorOwner(ctx, js[1], intake, times))
	}()
	// The watch feed: every event decoded once.
	wg.Add(1)
	go func() {
		defer wg.Done()
		fail(floorFeed(ctx, js[2], total, times))
	}()
	// The ingest: batches of the ingest's size inserted into the engine.
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := floorIngest(ctx, events, st, &inserted, total, times)
		if err == nil {
			close(done)
		}
		fail(err)
	}()

	publish := func(m *nats.Msg) error {
		_, err := js[0].PublishMsgAsync(m)
		for stalls := 0; errors.Is(err, jetstream.ErrTooManyStalledMsgs) && stalls < 1000; stalls++ {
			_, err = js[0].PublishMsgAsync(m)
		}
		if err != nil {
			return fmt.Errorf("publish intake: %w", err)
		}
		return nil
	}
	start, cpu0 := time.Now(), selfCPU()
	var batches int
	if rate == 0 {
		for i := 0; i < total; i++ {
			m := &nats.Msg{Subject: "floor." + strconv.Itoa(i%floorPartitions), Data: raws[i%len(raws)], Header: nats.Header{}}
			m.Header.Set(jetstream.MsgIDHeader, "floor-"+strconv.Itoa(i))
			if err := publish(m); err != nil {
				cancel(err)
				break
			}
		}
	} else if batches, err = floorPaced(ctx, total, rate, raws, times, publish); err != nil {
		cancel(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(5 * time.Minute):
		cancel(fmt.Errorf("pipeline floor: %d of %d inserted after 5m", inserted.Load(), total))
	}
	elapsed, cpu := time.Since(start), selfCPU()-cpu0
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	peak, _, _ := processMemory("self")
	cancel(nil)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	if n := inserted.Load(); n != int64(total) {
		return nil, fmt.Errorf("pipeline floor: %d of %d inserted", n, total)
	}
	run := &floorRun{Rate: float64(total) / elapsed.Seconds(), batches: batches,
		heapMiB: float64(ms.HeapInuse) / (1 << 20), peakRSSMiB: peak, cpu: cpu}
	if times != nil {
		times.mu.Lock()
		run.ack, run.watch, run.queryable = times.acks.done, times.watchs, times.inserts.done
		times.mu.Unlock()
	}
	return run, nil
}

// floorPaced publishes total events at rate, a batch every Tick, each
// batch as one intake entry per partition holding its events' encodings,
// each preceded by its length (as the intake batches a Submit).
func floorPaced(ctx context.Context, total, rate int, raws [][]byte, times *floorTimes, publish func(*nats.Msg) error) (batches int, err error) {
	t := time.NewTicker(Tick)
	defer t.Stop()
	start := time.Now()
	sent := 0
	b := 0
	for sent < total {
		select {
		case <-ctx.Done():
			return b, nil
		case now := <-t.C:
			n := min(int(float64(rate)*now.Sub(start).Seconds()), total) - sent
			if n <= 0 {
				continue
			}
			if b >= times.expected {
				return b, fmt.Errorf("pipeline floor: batch %d past the %d expected", b, times.expected)
			}
			var entries [floorPartitions]*nats.Msg
			stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
			for i := sent; i < sent+n; i++ {
				p := i % floorPartitions
				if entries[p] == nil {
					entries[p] = &nats.Msg{Subject: "floor." + strconv.Itoa(p), Header: nats.Header{}}
					entries[p].Header.Set(floorSentHeader, stamp)
					entries[p].Header.Set(floorBatchHeader, strconv.Itoa(b))
				}
				entries[p].Data = protowire.AppendBytes(entries[p].Data, raws[i%len(raws)])
			}
			times.mu.Lock()
			times.acks.left[b], times.inserts.left[b] = n, n
			times.mu.Unlock()
			for _, m := range entries {
				if m == nil {
					continue
				}
				if err := publish(m); err != nil {
					return b, err
				}
			}
			sent += n
			b++
		}
	}
	return b, nil
}

func floorOwner(ctx context.Context, js jetstream.JetStream, intake jetstream.Stream, times *floorTimes) error {
	cons, err := intake.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("owner consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	// Writes are pipelined, as the owners' are: their acks are awaited in
	// order by another goroutine, within the publisher's window.
	acks := make(chan jetstream.PubAckFuture, 4096)
	ackErr := make(chan error, 1)
	go func() {
		defer close(ackErr)
		for f := range acks {
			select {
			case <-f.Ok():
				times.acked(f.Msg().Header, time.Now())
			case err := <-f.Err():
				ackErr <- fmt.Errorf("owner publish ack: %w", err)
				for range acks {
				}
				return
			}
		}
	}()
	defer close(acks)
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("owner: %w", err)
		}
		md, _ := m.Metadata()
		// A paced entry holds a batch of occurrences; the others, one.
		occs := [][]byte{m.Data()}
		if times != nil {
			if occs, err = splitOccurrences(m.Data()); err != nil {
				return fmt.Errorf("owner: %w", err)
			}
		}
		for k, raw := range occs {
			ev, err := event.Unmarshal(raw)
			if err != nil {
				return fmt.Errorf("owner decode: %w", err)
			}
			out := &nats.Msg{Subject: event.SubjectOf(ev), Data: raw, Header: nats.Header{}}
			out.Header.Set(jetstream.MsgIDHeader, "w-"+strconv.FormatUint(md.Sequence.Stream, 10)+"."+strconv.Itoa(k))
			if times != nil {
				out.Header.Set(floorSentHeader, m.Headers().Get(floorSentHeader))
				out.Header.Set(floorBatchHeader, m.Headers().Get(floorBatchHeader))
			}
			f, err := js.PublishMsgAsync(out)
			for stalls := 0; errors.Is(err, jetstream.ErrTooManyStalledMsgs) && stalls < 1000; stalls++ {
				f, err = js.PublishMsgAsync(out)
			}
			if err != nil {
				return fmt.Errorf("owner publish: %w", err)
			}
			select {
			case acks <- f:
			case err := <-ackErr:
				return err
			}
		}
	}
}

// splitOccurrences splits a batched entry's data into its occurrences.
func splitOccurrences(data []byte) ([][]byte, error) {
	var out [][]byte
	for len(data) > 0 {
		b, k := protowire.ConsumeBytes(data)
		if k < 0 {
			return nil, errors.New("truncated occurrence in a batched entry")
		}
		out = append(out, b)
		data = data[k:]
	}
	return out, nil
}

func floorFeed(ctx context.Context, js jetstream.JetStream, total int, times *floorTimes) error {
	s, err := js.Stream(ctx, ejs.DefaultConfig().Stream)
	if err != nil {
		return err
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{ejs.SubjectsAll}})
	if err != nil {
		return fmt.Errorf("feed consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("feed: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for seen := 0; seen < total; seen++ {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("feed: %w", err)
		}
		if _, err := event.Unmarshal(m.Data()); err != nil {
			return fmt.Errorf("feed decode: %w", err)
		}
		times.watched(m.Headers(), time.Now())
	}
	return nil
}

func floorIngest(ctx context.Context, events jetstream.Stream, st *clickhouse.Store, inserted *atomic.Int64, total int, times *floorTimes) error {
	size, wait := st.Config().BatchSize, st.Config().BatchWait
	cons, err := events.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "floor-ingest", AckPolicy: jetstream.AckAllPolicy, MaxAckPending: 4 * size,
	})
	if err != nil {
		return fmt.Errorf("ingest consumer: %w", err)
	}
	// As the ingest does: one goroutine fetches and decodes the next batch
	// while another inserts the last one.
	type stamp struct {
		sent time.Time
		b    int
	}
	type batch struct {
		rows   []clickhouse.Row
		stamps []stamp // a paced run's: each row's batch
		last   jetstream.Msg
	}
	batches := make(chan batch, 1)
	fetchErr := make(chan error, 1)
	go func() {
		defer close(batches)
		for fetched := 0; fetched < total && ctx.Err() == nil; {
			msgs, err := cons.Fetch(size, jetstream.FetchMaxWait(wait))
			if err != nil {
				fetchErr <- fmt.Errorf("ingest fetch: %w", err)
				return
			}
			var b batch
			for m := range msgs.Messages() {
				ev, err := event.Unmarshal(m.Data())
				if err != nil {
					fetchErr <- fmt.Errorf("ingest decode: %w", err)
					return
				}
				md, _ := m.Metadata()
				b.rows = append(b.rows, clickhouse.Row{Seq: md.Sequence.Stream, Subject: m.Subject(), Event: ev, StoredAt: md.Timestamp, Raw: m.Data(), WriteReason: "created"})
				if times != nil {
					if sent, n, ok := floorStamp(m.Headers()); ok {
						b.stamps = append(b.stamps, stamp{sent, n})
					}
				}
				b.last = m
			}
			if err := msgs.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
				fetchErr <- fmt.Errorf("ingest fetch: %w", err)
				return
			}
			if len(b.rows) == 0 {
				continue
			}
			fetched += len(b.rows)
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	for b := range batches {
		if err := st.Insert(ctx, b.rows); err != nil {
			return fmt.Errorf("ingest insert: %w", err)
		}
		if err := b.last.Ack(); err != nil {
			return fmt.Errorf("ingest ack: %w", err)
		}
		inserted.Add(int64(len(b.rows)))
		now := time.Now()
		for _, x := range b.stamps {
			times.inserted(x.sent, x.b, now)
		}
	}
	select {
	case err := <-fetchErr:
		return err
	default:
	}
	if inserted.Load() < int64(total) {
		return ctx.Err()
	}
	return nil
}
