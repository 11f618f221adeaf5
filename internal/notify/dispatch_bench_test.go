package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/rules"
	"github.com/eventgate/eventgate/internal/watch"
)

// The delivery benchmarks run a gateway's rules machinery (store, engine,
// dispatcher) on an embedded JetStream server of their own, in process,
// with the production configuration of delivery. The CPU figures are the
// whole process's (user+sys: the server, the engine, the receiver
// included); wall time on a shared machine is noise.

// benchRig is a replica and the server it runs on.
type benchRig struct {
	ns     *server.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *rules.Store
	engine *rules.Engine
	uids   []string
}

// newBenchRig starts a server and a replica owning every shard, with
// nrules rules sending webhooks to url; none of them fires on its own (no
// event is ever published).
func newBenchRig(b *testing.B, nrules int, url string) *benchRig {
	b.Helper()
	r := &benchRig{}
	var err error
	if r.ns, err = ejs.Embedded(b.TempDir(), ""); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.ns.Shutdown)
	if r.nc, err = nats.Connect("", nats.InProcessServer(r.ns)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.nc.Close)
	if r.js, err = jetstream.New(r.nc); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := ejs.EnsureStream(ctx, r.js, ejs.DefaultConfig(), nil); err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if r.store, err = rules.OpenStore(ctx, r.js, "eventgate_rules", 1, log); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.store.Close)
	for i := range nrules {
		rule := &rules.Rule{UID: fmt.Sprintf("rule-%d", i), Name: fmt.Sprintf("r%d", i),
			Tenant:      rules.Tenant{Type: "project", Name: fmt.Sprintf("tenant-%d", i%10)},
			Filter:      query.Filter{Reason: query.StringSet{In: []string{"Never"}}},
			Condition:   rules.Condition{Kind: rules.KindEvery},
			Destination: rules.Destination{Kind: rules.DestWebhook, URL: url, Secret: secret}}
		if _, err := r.store.Create(ctx, rule); err != nil {
			b.Fatal(err)
		}
		r.uids = append(r.uids, rule.UID)
	}
	cfg := rules.DefaultConfig()
	cfg.ReplicaID = "bench"
	hub, err := watch.Start(ctx, r.js, cfg.EventsStream, log, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(hub.Stop)
	if r.engine, err = rules.Start(ctx, r.js, hub, r.store, cfg, log); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.engine.Stop)
	for r.engine.OwnedShards() < cfg.Shards {
		time.Sleep(10 * time.Millisecond) // polling ownership
	}
	return r
}

// startDispatcher starts delivery with the production configuration. A
// rule gets its worker and consumer with its first notification.
func (r *benchRig) startDispatcher(b *testing.B) *Dispatcher {
	b.Helper()
	d, err := Start(context.Background(), r.js, r.nc, r.engine, r.store, DefaultConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Stop)
	return d
}

// queue queues the notification of event seq for the rule with uid, as a
// shard queues it (under its id, and told to the engine).
func (r *benchRig) queue(b *testing.B, uid string, seq int) jetstream.PubAckFuture {
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1"},"note":"%0300d"}`, 0)
	n := rules.Notification{ID: fmt.Sprintf("%s:ev-%d:firing", uid, seq), Rule: "project/tenant/" + uid, RuleUID: uid,
		State: rules.StateFiring, Condition: rules.KindEvery, Time: time.Now().UTC(), Message: "web-1 deployed",
		Event: json.RawMessage(body)}
	data, _ := json.Marshal(&n)
	msg := nats.NewMsg(rules.NotifySubject(uid))
	msg.Data = data
	msg.Header.Set(rules.HeaderNotificationID, n.ID)
	f, err := r.js.PublishMsgAsync(msg, jetstream.WithMsgID(uid+"/"+n.ID))
	if err != nil {
		b.Fatal(err)
	}
	r.engine.NoteQueued(uid)
	return f
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverMsgs is how many messages the server has received and sent.
func serverMsgs(b *testing.B, ns *server.Server) int64 {
	v, err := ns.Varz(nil)
	if err != nil {
		b.Fatal(err)
	}
	return v.InMsgs + v.OutMsgs
}

// BenchmarkIdleRules measures what 1,000 rules cost while nothing
// happens: the process's CPU time per second (cpu-ms/s) and the messages
// the server handles per second (server-msgs/s), with the rules engine
// alone (notify=off: its shards, leases and checkpoints), with the
// dispatcher too (notify=on: rules that never notified have no worker),
// and with each rule notified once before (notify=notified: 1,000 idle
// workers, each with its consumer and a pull request standing). One
// iteration is one second; a run must span the workers' whole cycle of
// pull requests, their idle wait (DefaultConfig) and more:
// -benchtime=150x.
func BenchmarkIdleRules(b *testing.B) {
	for _, mode := range []string{"off", "on", "notified"} {
		b.Run("notify="+mode, func(b *testing.B) {
			var got atomic.Int64
			rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusNoContent)
				got.Add(1)
			}))
			defer rc.Close()
			r := newBenchRig(b, 1000, rc.URL)
			if mode != "off" {
				r.startDispatcher(b)
			}
			if mode == "notified" {
				for i, uid := range r.uids {
					r.queue(b, uid, i)
				}
				for deadline := time.Now().Add(time.Minute); got.Load() < int64(len(r.uids)); {
					if time.Now().After(deadline) {
						b.Fatalf("%d of %d notifications delivered after a minute", got.Load(), len(r.uids))
					}
					time.Sleep(10 * time.Millisecond) // polling the receiver
				}
			}
			// Past the start: the workers' first pulls, the shards'
			// first reads.
			time.Sleep(2 * time.Second) // settling, not synchronising
			msgs0, cpu0 := serverMsgs(b, r.ns), cpuTime()
			b.ResetTimer()
			for range b.N {
				time.Sleep(time.Second) // idling is what is measured
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/s")
			b.ReportMetric(float64(serverMsgs(b, r.ns)-msgs0)/float64(b.N), "server-msgs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// deliveryRules is how many rules BenchmarkDeliveryCPU's notifications
// are spread over.
const deliveryRules = 100

// BenchmarkDeliveryCPU measures the process's CPU time per 1,000
// notifications delivered to a local webhook receiver (cpu-ms/1k), from
// their queuing to their acknowledgement and their delivery log record,
// the messages the server handles for each (server-msgs/op) and how many
// connections the receiver accepted meanwhile (receiver-conns).
// Each is queued as a shard queues it (deduplicated under its id), round
// robin over deliveryRules rules, at rate per second: a trickle, as rules
// fire on a live feed, not a backlog: at 1,000/s each rule gets one every
// 100ms, at 100/s one a second (until the queues' state moved to the
// server's memory, the server wrote a consumer's state at most every
// 100ms, so the sparser a rule's notifications, the fewer writes they
// shared). queue=only queues them with no dispatcher running:
// the floor that is not delivery's (the queuing, the engine idling).
// -benchtime=2000x.
func BenchmarkDeliveryCPU(b *testing.B) {
	for _, rate := range []int{1000, 100} {
		for _, deliver := range []bool{false, true} {
			b.Run(fmt.Sprintf("rate=%d/%s", rate, map[bool]string{false: "queue=only", true: "queue=deliver"}[deliver]), func(b *testing.B) {
				benchDelivery(b, rate, deliver)
			})
		}
	}
}

func benchDelivery(b *testing.B, rate int, deliver bool) {
	var got, want, conns atomic.Int64
	reached := make(chan struct{}, 1)
	rc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
		if got.Add(1) == want.Load() {
			reached <- struct{}{}
		}
	}))
	rc.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	rc.Start()
	defer rc.Close()
	r := newBenchRig(b, deliveryRules, rc.URL)
	ctx := context.Background()
	seq := 0
	queue := func() jetstream.PubAckFuture {
		f := r.queue(b, r.uids[seq%len(r.uids)], seq)
		seq++
		return f
	}
	// settled waits until the receiver has n notifications, the delivery
	// log n records, and every consumer has acknowledged what it got.
	var logS jetstream.Stream
	settled := func(n int) {
		want.Store(int64(n))
		if got.Load() < int64(n) {
			select {
			case <-reached:
			case <-time.After(time.Minute):
				b.Fatalf("%d of %d notifications delivered after a minute", got.Load(), n)
			}
		}
		for deadline := time.Now().Add(time.Minute); ; {
			info, err := logS.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			pending := 0
			if info.State.Msgs >= uint64(n) {
				l := r.engine.Stream().ListConsumers(ctx)
				for ci := range l.Info() {
					pending += ci.NumAckPending + int(ci.NumPending)
				}
				if err := l.Err(); err != nil {
					b.Fatal(err)
				}
				if pending == 0 {
					return
				}
			}
			if time.Now().After(deadline) {
				b.Fatalf("after a minute, %d of %d deliveries recorded, %d unacknowledged", info.State.Msgs, n, pending)
			}
			time.Sleep(10 * time.Millisecond) // polling the log and the consumers
		}
	}
	if deliver {
		r.startDispatcher(b)
		var err error
		if logS, err = r.js.Stream(ctx, LogStream); err != nil {
			b.Fatal(err)
		}
		// A first round, not measured: each worker has pulled once, the
		// receiver's connections are open.
		for range r.uids {
			queue()
		}
		settled(len(r.uids))
	}

	var futures []jetstream.PubAckFuture
	batch := rate / 100 // every 10ms
	msgs0, conns0, cpu0 := serverMsgs(b, r.ns), conns.Load(), cpuTime()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if i%batch == 0 && i > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i/batch) * 10 * time.Millisecond))) // pacing the queue
		}
		futures = append(futures, queue())
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	if deliver {
		settled(seq)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N)*1000, "cpu-ms/1k")
	b.ReportMetric(float64(serverMsgs(b, r.ns)-msgs0)/float64(b.N), "server-msgs/op")
	b.ReportMetric(float64(conns.Load()-conns0), "receiver-conns")
	b.ReportMetric(0, "ns/op")
}
