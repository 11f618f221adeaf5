package ingest

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/query"
)

// BenchmarkIngestThroughput measures the whole ingest path with the default
// thresholds: JetStream fetch, decode, INSERT and acks, from a stream that
// already holds the events (a catch-up after an outage), in rows/s.
func BenchmarkIngestThroughput(b *testing.B) {
	const total = 100_000
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		n := startNATS(b)
		s := openStore(b, chtest.Transports[0], chtest.Database(b))
		at := time.Now().Add(-time.Hour)
		var last uint64
		for j := 0; j < total; j += 1000 {
			evs := make([]*eventgatev1.Event, 1000)
			for k := range evs {
				evs[k] = chtest.RealisticEvent(j+k, 1000, at)
			}
			seqs := n.publish(b, evs...)
			last = seqs[len(seqs)-1]
		}
		b.StartTimer()
		start := time.Now()
		in, err := Start(context.Background(), n.js, n.stream, writer(b, s), Config{BatchSize: benchBatch()}, chtest.Logger(b), nil)
		if err != nil {
			b.Fatal(err)
		}
		waitFloor(b, in, last, 5*time.Minute)
		elapsed += time.Since(start)
		b.StopTimer()
		in.Stop(context.Background())
		b.StartTimer()
	}
	b.ReportMetric(float64(total*b.N)/elapsed.Seconds(), "rows/s")
}

// BenchmarkIngestVisibility measures, with the default thresholds, the time
// from an emit (JetStream ack) until Query at the ingest ack floor returns
// the event, one event at a time (the low-rate worst case: every event
// waits for BatchWait).
func BenchmarkIngestVisibility(b *testing.B) {
	n := startNATS(b)
	s := openStore(b, chtest.Transports[0], chtest.Database(b))
	in := startIngest(b, n, writer(b, s), Config{}, nil)
	ctx := context.Background()
	var lat chtest.Latencies
	for i := 0; i < b.N; i++ {
		ev := chtest.RealisticEvent(i, 10, time.Now())
		start := time.Now()
		seq := n.publish(b, ev)[0]
		for {
			floor, err := in.AckFloor(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if floor >= seq {
				p, err := s.Query(ctx, query.List{Scope: query.Scope{All: true}, Filter: query.Filter{Regarding: query.ObjectFilter{Name: query.StringSet{In: []string{ev.Regarding.Name}}}}, PageSize: 1}, floor)
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Events) == 1 && p.Events[0].Uid == ev.Uid {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, time.Since(start))
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
	}
	lat.Report(b)
}

// benchBatch is EVENTGATE_BENCH_BATCH (default: the store's default).
func benchBatch() int {
	n, _ := strconv.Atoi(os.Getenv("EVENTGATE_BENCH_BATCH"))
	return n
}
