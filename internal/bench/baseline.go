package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// normalized returns n workload events as the gateway stores them (server
// fields filled by the gateway's own Normalizer), with their encodings.
func normalized(n int, prefix string) ([]*eventgatev1.Event, [][]byte, error) {
	w := NewWorkload(prefix)
	w.RepeatShare = 0
	rng := rand.New(rand.NewPCG(1, 2))
	norm := event.Normalizer{Limits: event.DefaultLimits()}
	evs := w.Batch(rng, n)
	raws := make([][]byte, n)
	for i, ev := range evs {
		if vs := norm.Normalize(ev, nil, "", "events["+strconv.Itoa(i)+"]"); len(vs) > 0 {
			return nil, nil, fmt.Errorf("workload event invalid: %v", vs)
		}
		raw, err := event.Marshal(ev)
		if err != nil {
			return nil, nil, fmt.Errorf("marshal event: %w", err)
		}
		raws[i] = raw
	}
	return evs, raws, nil
}

// EventSize is the mean encoded size of a workload event as stored.
func EventSize() (float64, error) {
	_, raws, err := normalized(1000, "size")
	if err != nil {
		return 0, err
	}
	total := 0
	for _, r := range raws {
		total += len(r)
	}
	return float64(total) / float64(len(raws)), nil
}

// JetStreamPublish measures PublishAsync throughput (messages/s) of total
// workload events into a stream configured as the gateway's events stream
// (file storage), on an embedded server of its own under dir.
func JetStreamPublish(ctx context.Context, dir string, total int) (float64, error) {
	ns, err := ejs.Embedded(dir, "")
	if err != nil {
		return 0, err
	}
	defer ns.Shutdown()
	nc, err := ejs.Connect(ejs.DefaultConfig(), ns, "bench-baseline")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := ejs.NewJetStream(nc)
	if err != nil {
		return 0, err
	}
	// As the gateway does: on a small disk the stream's limit is lowered.
	scfg, _, _ := ejs.FitMaxBytes(ctx, js, ns, ejs.DefaultConfig())
	if _, err := ejs.EnsureStream(ctx, js, scfg, nil); err != nil {
		return 0, err
	}
	evs, raws, err := normalized(min(total, 20_000), "js")
	if err != nil {
		return 0, err
	}
	msgs := make([]*nats.Msg, len(evs))
	for i, ev := range evs {
		msgs[i] = &nats.Msg{Subject: event.SubjectOf(ev), Data: raws[i]}
	}
	start := time.Now()
	for i := 0; i < total; i++ {
		_, err := js.PublishMsgAsync(msgs[i%len(msgs)])
		for stalls := 0; errors.Is(err, jetstream.ErrTooManyStalledMsgs) && stalls < 100; stalls++ {
			// The server is behind (a busy machine): the publisher's
			// window is full; it drains as acknowledgements come.
			_, err = js.PublishMsgAsync(msgs[i%len(msgs)])
		}
		if err != nil {
			return 0, fmt.Errorf("publish async: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(2 * time.Minute):
		return 0, fmt.Errorf("publish async: %d acks pending after 2m", js.PublishAsyncPending())
	}
	rate := float64(total) / time.Since(start).Seconds()
	s, err := js.Stream(ctx, ejs.DefaultConfig().Stream)
	if err != nil {
		return 0, fmt.Errorf("stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	if info.State.Msgs != uint64(total) {
		return 0, fmt.Errorf("stream holds %d messages, published %d", info.State.Msgs, total)
	}
	return rate, nil
}

// ClickHouseInsert measures the embedded engine's insert throughput (rows/s)
// through the store's own Insert (the real events table and its analytics
// views) in batches of the ingest's default batch size, runs times, in a
// fresh data directory dir. It loads libchdb.so, so the runner calls it in a
// child process.
func ClickHouseInsert(ctx context.Context, dir, lib string, batches, runs int) ([]float64, error) {
	cfg := clickhouse.DefaultConfig()
	cfg.DataDir, cfg.ChDBLib = dir, lib
	st, err := clickhouse.Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	size := st.Config().BatchSize
	evs, raws, err := normalized(size*batches, "ch")
	if err != nil {
		return nil, err
	}
	stored := time.Now()
	rows := make([]clickhouse.Row, len(evs))
	for i, ev := range evs {
		rows[i] = clickhouse.Row{Subject: event.SubjectOf(ev), Event: ev, StoredAt: stored, Raw: raws[i], WriteReason: "created"}
	}
	var rates []float64
	seq := uint64(0)
	for r := 0; r < runs; r++ {
		start := time.Now()
		for b := 0; b < batches; b++ {
			batch := rows[b*size : (b+1)*size]
			for i := range batch {
				seq++
				batch[i].Seq = seq
			}
			if err := st.Insert(ctx, batch); err != nil {
				return nil, err
			}
		}
		rates = append(rates, float64(size*batches)/time.Since(start).Seconds())
	}
	return rates, nil
}

// NATSFanout measures plain NATS fan-out latency (ms): subs subscriptions
// over conns connections on the server at url, one subject each, while
// rate messages/s of size bytes are published round-robin for d. It
// returns every delivery's latency.
func NATSFanout(ctx context.Context, url string, subs, conns, rate, size int, d time.Duration) ([]float64, error) {
	pub, err := nats.Connect(url, nats.Name("bench-fanout-pub"))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer pub.Close()
	var mu sync.Mutex
	var lat []float64
	var ncs []*nats.Conn
	defer func() {
		for _, nc := range ncs {
			nc.Close()
		}
	}()
	for c := 0; c < conns; c++ {
		nc, err := nats.Connect(url, nats.Name("bench-fanout-sub"))
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		ncs = append(ncs, nc)
	}
	received := 0
	for i := 0; i < subs; i++ {
		_, err := ncs[i%conns].Subscribe("bench.fanout."+strconv.Itoa(i), func(m *nats.Msg) {
			l := float64(time.Now().UnixNano()-int64(binary.BigEndian.Uint64(m.Data))) / 1e6
			mu.Lock()
			lat = append(lat, l)
			received++
			mu.Unlock()
		})
		if err != nil {
			return nil, fmt.Errorf("subscribe: %w", err)
		}
	}
	for _, nc := range ncs {
		if err := nc.Flush(); err != nil {
			return nil, fmt.Errorf("flush: %w", err)
		}
	}
	payload := make([]byte, size)
	i := 0
	sent, err := Pace(ctx, rate, d, func(n int) error {
		for k := 0; k < n; k++ {
			binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
			if err := pub.Publish("bench.fanout."+strconv.Itoa(i%subs), payload); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			i++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := pub.Flush(); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	err = WaitFor(ctx, 30*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return received >= sent, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("fan-out: %d of %d delivered: %w", received, sent, err)
	}
	return lat, nil
}

// TempDir makes a directory under base (or the system temp dir).
func TempDir(base, pattern string) (string, error) {
	d, err := os.MkdirTemp(base, pattern)
	if err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	return d, nil
}
