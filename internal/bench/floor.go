package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/event"
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
// composed parts on a fresh embedded server and engine under dir, and
// returns the events per second from the first publish until the engine
// holds the last. It loads libchdb.so, so the runner calls it in a child
// process.
func PipelineFloor(ctx context.Context, dir, lib string, total int) (float64, error) {
	ns, err := ejs.Embedded(dir+"/nats", "")
	if err != nil {
		return 0, err
	}
	defer ns.Shutdown()
	cfg := clickhouse.DefaultConfig()
	cfg.DataDir, cfg.ChDBLib = dir+"/clickhouse", lib
	st, err := clickhouse.Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return 0, err
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
			return 0, err
		}
		defer nc.Close()
		js[i] = j
	}
	events, err := ejs.EnsureStream(ctx, js[0], ejs.DefaultConfig())
	if err != nil {
		return 0, err
	}
	intake, err := js[0].CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "FLOOR_INTAKE", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute, AllowDirect: true,
	})
	if err != nil {
		return 0, fmt.Errorf("intake stream: %w", err)
	}

	_, raws, err := normalized(min(total, 20_000), "floor")
	if err != nil {
		return 0, err
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
		fail(floorOwner(ctx, js[1], intake))
	}()
	// The watch feed: every event decoded once.
	wg.Add(1)
	go func() {
		defer wg.Done()
		fail(floorFeed(ctx, js[2], total))
	}()
	// The ingest: batches of the ingest's size inserted into the engine.
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := floorIngest(ctx, events, st, &inserted, total)
		if err == nil {
			close(done)
		}
		fail(err)
	}()

	start := time.Now()
	for i := 0; i < total; i++ {
		m := &nats.Msg{Subject: "floor." + strconv.Itoa(i%floorPartitions), Data: raws[i%len(raws)], Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, "floor-"+strconv.Itoa(i))
		_, err := js[0].PublishMsgAsync(m)
		for stalls := 0; errors.Is(err, jetstream.ErrTooManyStalledMsgs) && stalls < 1000; stalls++ {
			_, err = js[0].PublishMsgAsync(m)
		}
		if err != nil {
			cancel(fmt.Errorf("publish intake: %w", err))
			break
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(5 * time.Minute):
		cancel(fmt.Errorf("pipeline floor: %d of %d inserted after 5m", inserted.Load(), total))
	}
	elapsed := time.Since(start)
	cancel(nil)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return 0, err
	}
	if n := inserted.Load(); n != int64(total) {
		return 0, fmt.Errorf("pipeline floor: %d of %d inserted", n, total)
	}
	return float64(total) / elapsed.Seconds(), nil
}

func floorOwner(ctx context.Context, js jetstream.JetStream, intake jetstream.Stream) error {
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
		ev, err := event.Unmarshal(m.Data())
		if err != nil {
			return fmt.Errorf("owner decode: %w", err)
		}
		md, _ := m.Metadata()
		out := &nats.Msg{Subject: event.SubjectOf(ev), Data: m.Data(), Header: nats.Header{}}
		out.Header.Set(jetstream.MsgIDHeader, "w-"+strconv.FormatUint(md.Sequence.Stream, 10))
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

func floorFeed(ctx context.Context, js jetstream.JetStream, total int) error {
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
	}
	return nil
}

func floorIngest(ctx context.Context, events jetstream.Stream, st *clickhouse.Store, inserted *atomic.Int64, total int) error {
	size, wait := st.Config().BatchSize, st.Config().BatchWait
	cons, err := events.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "floor-ingest", AckPolicy: jetstream.AckAllPolicy, MaxAckPending: 4 * size,
	})
	if err != nil {
		return fmt.Errorf("ingest consumer: %w", err)
	}
	// As the ingest does: one goroutine fetches and decodes the next batch
	// while another inserts the last one.
	type batch struct {
		rows []clickhouse.Row
		last jetstream.Msg
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
