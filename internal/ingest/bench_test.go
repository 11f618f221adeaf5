package ingest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
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
		s := openStore(b, transports[0], testDatabase(b))
		at := time.Now().Add(-time.Hour)
		var last uint64
		for j := 0; j < total; j += 1000 {
			evs := make([]*eventgatev1.Event, 1000)
			for k := range evs {
				evs[k] = realisticEvent(j+k, 1000, at)
			}
			seqs := n.publish(b, evs...)
			last = seqs[len(seqs)-1]
		}
		b.StartTimer()
		start := time.Now()
		in, err := Start(context.Background(), n.js, n.stream, writer(b, s), Config{BatchSize: benchBatch()}, testLogger(b), nil)
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
	s := openStore(b, transports[0], testDatabase(b))
	in := startIngest(b, n, writer(b, s), Config{}, nil)
	ctx := context.Background()
	var lat latencies
	for i := 0; i < b.N; i++ {
		ev := realisticEvent(i, 10, time.Now())
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
	lat.report(b)
}

// benchBatch is EVENTGATE_BENCH_BATCH (default: the store's default).
func benchBatch() int {
	n, _ := strconv.Atoi(os.Getenv("EVENTGATE_BENCH_BATCH"))
	return n
}

// latencies records per-call latencies and reports p50/p99.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	q := func(p float64) float64 {
		i := int(p * float64(len(l)-1))
		return float64(l[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(0, "ns/op")
}

// realisticEvent is a ~600-byte event of one of `tenants` tenants.
func realisticEvent(i, tenants int, at time.Time) *eventgatev1.Event {
	obj := i % 10_000
	ns := fmt.Sprintf("ns-%d", obj%10)
	name := fmt.Sprintf("api-%d-7d4f8b9c5-x%04d", obj, i%7919)
	return &eventgatev1.Event{
		Uid:                 fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i, i*7919),
		Name:                name + fmt.Sprintf(".%016x", i),
		Namespace:           ns,
		EventTime:           timestamppb.New(at.Add(time.Duration(i) * time.Millisecond).Truncate(time.Microsecond)),
		Series:              &eventgatev1.EventSeries{Count: int32(i%5 + 1), LastObservedTime: timestamppb.New(at.Truncate(time.Microsecond)), State: "Ongoing"},
		ReportingController: "example.com/payment-operator", ReportingInstance: fmt.Sprintf("payment-operator-%d", i%20),
		Action: "Reconcile", Reason: fmt.Sprintf("Reason%d", i%50), Type: "Warning",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: name,
			Uid: fmt.Sprintf("%08x-0000-4000-8000-%012x", obj, obj), ResourceVersion: "123456"},
		Related: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: ns, Name: name + "-pod"},
		Note: "Back-off restarting failed container payment in pod " + name + ": exit code 137 (OOMKilled); " +
			"memory limit 512Mi exceeded while processing the settlement batch, retrying in 40s",
		Tenant:      &eventgatev1.Tenant{Type: "project", Name: fmt.Sprintf("tenant-%d", i%tenants)},
		Labels:      map[string]string{"app": "payment", "tier": "backend", "team": fmt.Sprintf("team-%d", obj%30)},
		Annotations: map[string]string{"example.com/trace-id": fmt.Sprintf("%032x", i)},
		Metadata:    map[string]string{"revision": "v1.42.0"},
	}
}
