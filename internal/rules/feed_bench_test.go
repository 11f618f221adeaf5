package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/watch"
)

// The live feed as the bench's rules section offers it: feedTenants
// tenants, one rule each (one in ten can fire), the events of every tenant
// published at feedRate per second.
const (
	feedTenants = 1000
	feedRate    = 4000
	feedShards  = 4
)

// BenchmarkShardsOnTheLiveFeed measures what the rules' shards cost the
// process that hosts them: the CPU time (user+sys, the whole process, the
// embedded server included) per 1,000 events published at feedRate, with
// the engine and no rules (as a gateway before any is created) and with a
// rule in each of feedTenants tenants; and how long after the last publish
// every shard has checkpointed its last event (lag-ms, the checkpoint
// interval mostly), and the p99 of the notifications' time from their
// event's storing to their own (queued-p99-ms); engine=off is the
// floor, publishing and storing alone. The CPU figure is the one to
// compare: wall time on a shared machine is noise.
func BenchmarkShardsOnTheLiveFeed(b *testing.B) {
	b.Run("engine=off", func(b *testing.B) { benchFeed(b, -1) })
	// 4,000: four rules a tenant, spread over the shards by their uids.
	for _, n := range []int{0, feedTenants, 4 * feedTenants} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) { benchFeed(b, n) })
	}
}

func benchFeed(b *testing.B, nrules int) {
	ns, err := ejs.Embedded(b.TempDir(), "")
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := ejs.EnsureStream(ctx, js, ejs.DefaultConfig(), nil); err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	store, err := OpenStore(ctx, js, "eventgate_rules", 1, log)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var uids []string
	tenantShards := map[string][]int{}
	cfg := DefaultConfig()
	cfg.Shards, cfg.ReplicaID = feedShards, "bench"
	shardOf := (&Engine{cfg: cfg}).ShardOf
	for i := 0; i < nrules; i++ {
		team := "team-none"
		if i%10 == 9 {
			team = "team-" + strconv.Itoa(i%30)
		}
		r := &Rule{UID: fmt.Sprintf("rule-%d", i), Name: fmt.Sprintf("r%d", i), Tenant: Tenant{Type: "project", Name: feedTenant(i % feedTenants)},
			Filter:      query.Filter{Type: query.StringSet{In: []string{"Warning"}}, Labels: []query.LabelReq{{Key: "team", Op: "=", Values: []string{team}}}},
			Condition:   Condition{Kind: KindEvery},
			Destination: Destination{Kind: DestNATS, Subject: "bench.notify"}}
		if _, err := store.Create(ctx, r); err != nil {
			b.Fatal(err)
		}
		uids = append(uids, r.UID)
		tenantShards[r.Tenant.Name] = append(tenantShards[r.Tenant.Name], shardOf(r.Tenant))
	}
	// Every gateway has its live feed, rules or not.
	hub, err := watch.Start(ctx, js, cfg.EventsStream, log, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer hub.Stop()
	if nrules >= 0 {
		e, err := Start(ctx, js, hub, store, cfg, log)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Stop()
		for _, uid := range uids {
			for !e.Evaluates(uid) {
				time.Sleep(10 * time.Millisecond) // polling the engine's take-in
			}
		}
		for e.OwnedShards() < feedShards {
			time.Sleep(10 * time.Millisecond) // polling ownership
		}
	}

	// The notifications' time in queue after their event was stored: the
	// shard's part of a notification's latency.
	var queued []float64
	var qmu sync.Mutex
	if nrules > 0 {
		cons, err := js.OrderedConsumer(ctx, NotifyStream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			var n Notification
			meta, err := m.Metadata()
			if err != nil || json.Unmarshal(m.Data(), &n) != nil {
				return
			}
			qmu.Lock()
			queued = append(queued, float64(meta.Timestamp.Sub(n.Time))/float64(time.Millisecond))
			qmu.Unlock()
		})
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Stop()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	last := make([]uint64, feedShards) // the last seq each shard must evaluate
	var futures []jetstream.PubAckFuture
	var tenants []string
	const batch = feedRate / 100 // every 10ms
	cpu0 := cpuTime()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if i%batch == 0 && i > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i/batch) * 10 * time.Millisecond))) // pacing the feed
		}
		ev := feedEvent(rng, i)
		data, err := event.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		f, err := js.PublishAsync(event.SubjectOf(ev), data)
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
		tenants = append(tenants, ev.GetTenant().GetName())
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			for _, s := range tenantShards[tenants[i]] {
				last[s] = max(last[s], ack.Sequence)
			}
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	published := time.Now()
	kv, err := js.KeyValue(ctx, cfg.StateBucket)
	if err != nil && nrules >= 0 {
		b.Fatal(err)
	}
	for s := range last {
		for last[s] > 0 {
			ent, err := kv.Get(ctx, stateKey(s))
			if err != nil {
				b.Fatal(err)
			}
			var c checkpointData
			if err := decodeCheckpoint(ent.Value(), &c); err != nil {
				b.Fatal(err)
			}
			if c.Seq >= last[s] {
				break
			}
			time.Sleep(5 * time.Millisecond) // polling the checkpoint
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N)*1000, "cpu-ms/1k-events")
	b.ReportMetric(float64(time.Since(published))/float64(time.Millisecond), "lag-ms")
	qmu.Lock()
	defer qmu.Unlock()
	if len(queued) > 0 {
		slices.Sort(queued)
		b.ReportMetric(queued[len(queued)*99/100], "queued-p99-ms")
		b.ReportMetric(float64(len(queued)), "notifications")
	}
}

func feedTenant(i int) string { return "tenant-" + strconv.Itoa(i) }

var feedKinds = []string{"Pod", "Deployment", "ReplicaSet", "Node", "Job", "Service", "ConfigMap", "StatefulSet"}

// feedEvent is an event of about 600 bytes encoded, of a random tenant.
func feedEvent(rng *rand.Rand, i int) *eventgatev1.Event {
	typ := "Normal"
	if rng.IntN(4) == 0 {
		typ = "Warning"
	}
	ns := "ns-" + strconv.Itoa(rng.IntN(5))
	kind := feedKinds[rng.IntN(len(feedKinds))]
	return &eventgatev1.Event{
		Uid: "ev-" + strconv.Itoa(i), Type: typ, Reason: "Reason" + strconv.Itoa(rng.IntN(50)), Action: "Act",
		Namespace: ns, EventTime: timestamppb.Now(),
		Note:                "something happened to the object " + strings.Repeat("x", 300),
		ReportingController: "example.com/controller", ReportingInstance: "instance-" + strconv.Itoa(rng.IntN(200)),
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: kind, Namespace: ns, Name: "obj-" + strconv.Itoa(i), Uid: "uid-" + strconv.Itoa(i)},
		Labels:    map[string]string{"team": "team-" + strconv.Itoa(rng.IntN(30)), "app": "app-" + strconv.Itoa(rng.IntN(100))},
		Tenant:    &eventgatev1.Tenant{Type: "project", Name: feedTenant(rng.IntN(feedTenants))},
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
