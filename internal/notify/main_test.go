package notify

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eventgate/eventgate/client/signature"
	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/rules"
	"github.com/eventgate/eventgate/internal/watch"
)

// ns is the package's real NATS JetStream server, started once; each test
// starts from empty streams and buckets (newEnv deletes them), so tests
// must not run in parallel.
var (
	ns    *server.Server
	nsDir string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "notify-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	nsDir = dir
	ns, err = ejs.Embedded(dir, "127.0.0.1:-1")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	ns.Shutdown()
	ns.WaitForShutdown()
	os.RemoveAll(dir)
	os.Exit(code)
}

// replica is one gateway's rules machinery: its own NATS connection,
// store, engine and dispatcher.
type replica struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *rules.Store
	hub    *watch.Hub
	engine *rules.Engine
	disp   *Dispatcher
}

// testEnv is one test's streams and configuration.
type testEnv struct {
	t       *testing.T
	stream  string
	pub     jetstream.JetStream
	rcfg    rules.Config
	ncfg    Config
	seq     atomic.Int32
	cleanup []func()
}

// connectJS connects to the package's server for the test's duration.
func connectJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	e := &testEnv{t: t, stream: "EVENTS", pub: connectJS(t)}
	ctx := context.Background()
	for _, s := range []string{"EVENTS", rules.NotifyStream, LogStream} {
		_ = e.pub.DeleteStream(ctx, s)
	}
	for _, b := range []string{"eventgate_rules", "eventgate_rules_state", "eventgate_rules_leases"} {
		_ = e.pub.DeleteKeyValue(ctx, b)
	}
	if err := retryStore(func() error { _, err := ejs.EnsureStream(ctx, e.pub, ejs.DefaultConfig(), nil); return err }); err != nil {
		t.Fatal(err)
	}
	e.rcfg = rules.DefaultConfig()
	e.rcfg.Shards = 2
	e.rcfg.LeaseTTL = 2 * time.Second
	e.rcfg.Checkpoint = 100 * time.Millisecond
	e.rcfg.Tick = 100 * time.Millisecond
	e.rcfg.Duplicates = time.Minute
	e.ncfg = DefaultConfig()
	e.ncfg.Backoff = 50 * time.Millisecond
	e.ncfg.MaxBackoff = 200 * time.Millisecond
	e.ncfg.Timeout = 2 * time.Second
	t.Cleanup(func() {
		for i := len(e.cleanup) - 1; i >= 0; i-- {
			e.cleanup[i]()
		}
	})
	return e
}

// retryStore retries fn while the server refuses to create a stream's
// store: a stream deleted by the previous test may still be going away
// on disk (API error 10049).
func retryStore(fn func() error) error {
	for i := 0; ; i++ {
		err := fn()
		if err == nil || i == 50 || !strings.Contains(err.Error(), "10049") {
			return err
		}
		time.Sleep(50 * time.Millisecond) // the old stream's files being removed
	}
}

// start starts a replica. Its Close is graceful; kill is not.
func (e *testEnv) start(id string) *replica {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &replica{}
	var err error
	if r.nc, err = nats.Connect(ns.ClientURL(), nats.MaxReconnects(0)); err != nil {
		e.t.Fatal(err)
	}
	if r.js, err = jetstream.New(r.nc); err != nil {
		e.t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", id)
	}
	if err = retryStore(func() (err error) { r.store, err = rules.OpenStore(ctx, r.js, e.rcfg.RulesBucket, 1, log); return err }); err != nil {
		e.t.Fatal(err)
	}
	cfg := e.rcfg
	cfg.ReplicaID = id
	if r.hub, err = watch.Start(ctx, r.js, cfg.EventsStream, log, nil); err != nil {
		e.t.Fatal(err)
	}
	if err = retryStore(func() (err error) { r.engine, err = rules.Start(ctx, r.js, r.hub, r.store, cfg, log); return err }); err != nil {
		e.t.Fatal(err)
	}
	if err = retryStore(func() (err error) {
		r.disp, err = Start(ctx, r.js, r.nc, r.engine, r.store, e.ncfg, nil, log)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	e.cleanup = append(e.cleanup, r.close)
	return r
}

var closed sync.Map

// close stops the replica gracefully: shards handed over.
func (r *replica) close() {
	if _, done := closed.LoadOrStore(r, true); done {
		return
	}
	r.disp.Stop()
	r.engine.Stop()
	r.hub.Stop()
	r.store.Close()
	r.nc.Close()
}

// kill cuts the replica off NATS at once, as a SIGKILL would: no last
// checkpoint, no lease released, nothing acknowledged any more.
func (r *replica) kill() {
	if _, done := closed.LoadOrStore(r, true); done {
		return
	}
	r.nc.Close()
	r.disp.Stop()
	r.engine.Stop()
	r.hub.Stop()
	r.store.Close()
}

// emit stores events in the events stream as the gateway's writes do.
func (e *testEnv) emit(evs ...*eventgatev1.Event) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ev := range evs {
		if ev.Uid == "" {
			ev.Uid = fmt.Sprintf("ev-%d", e.seq.Add(1))
		}
		if ev.EventTime == nil {
			ev.EventTime = timestamppb.Now()
		}
		b, err := event.Marshal(ev)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.pub.Publish(ctx, event.SubjectOf(ev), b); err != nil {
			e.t.Fatal(err)
		}
	}
}

func podEvent(typ, reason, pod string) *eventgatev1.Event {
	return &eventgatev1.Event{
		Type: typ, Reason: reason, Namespace: "default", Note: reason + " of " + pod,
		ReportingController: "kubelet",
		Regarding:           &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "default", Name: pod},
		Tenant:              &eventgatev1.Tenant{Type: "project", Name: "p1"},
	}
}

var tenant = rules.Tenant{Type: "project", Name: "p1"}

// createRule stores r through the store of rep, with a fresh uid (and in
// tenant p1 unless it names one), and waits until one of owners evaluates
// it (none given: returns at once).
func (e *testEnv) createRule(rep *replica, r *rules.Rule, owners ...*replica) *rules.Rule {
	e.t.Helper()
	r.UID = fmt.Sprintf("%s-%d", r.Name, time.Now().UnixNano())
	if r.Tenant == (rules.Tenant{}) {
		r.Tenant = tenant
	}
	if err := r.Validate(); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stored, err := rep.store.Create(ctx, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(owners) > 0 {
		e.waitEvaluated(stored, owners...)
	}
	return stored
}

// waitEvaluated waits until one of the replicas evaluates the rule, so
// that the events emitted next are evaluated by it.
func (e *testEnv) waitEvaluated(r *rules.Rule, reps ...*replica) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, rep := range reps {
			if rep.engine.Evaluates(r.UID) {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("rule %s not taken in by any shard owner", r.ID())
		}
		time.Sleep(10 * time.Millisecond) // polling the engines
	}
}

// everyDeployed is a rule notifying rc, signed, of every Deployed event
// of its tenant.
func everyDeployed(rc *receiver) *rules.Rule {
	return &rules.Rule{
		Name: "every", Filter: reasonFilter("Deployed"), Condition: rules.Condition{Kind: rules.KindEvery},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: rc.srv.URL, Secret: secret},
	}
}

func reasonFilter(reason string) query.Filter {
	return query.Filter{Reason: query.StringSet{In: []string{reason}}}
}

// waitDeliveries polls rep's delivery log of rule uid (at most limit
// deliveries, newest first) until done holds of it, and returns it; the
// test fails after 10s, saying what it waited for.
func waitDeliveries(t *testing.T, rep *replica, uid string, limit int, what string, done func([]Delivery) bool) []Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := rep.disp.Deliveries(context.Background(), uid, limit)
		if err != nil {
			t.Fatal(err)
		}
		if done(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: delivery log %+v", what, ds)
		}
		time.Sleep(50 * time.Millisecond) // polling the delivery log
	}
}

// restartServer stops the package's server and starts it again on its
// store and port, as a gateway restarted with its embedded server: what
// it kept on disk is back, what it kept in memory is gone. Connections
// to it are cut.
func restartServer(t *testing.T) {
	t.Helper()
	addr := ns.Addr().String()
	ns.Shutdown()
	ns.WaitForShutdown()
	s, err := ejs.Embedded(nsDir, addr)
	if err != nil {
		t.Fatalf("start the server again: %v", err)
	}
	ns = s
}

// receiver is an HTTP destination that records what it accepted, by id.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []received
	down atomic.Bool
	// refuse: a notification id the receiver answers 503 while set.
	refuse atomic.Pointer[string]
	seen   chan received
}

type received struct {
	id     string
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, check func(http.Header, []byte) error) *receiver {
	rc := &receiver{seen: make(chan received, 1000)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rc.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if id := rc.refuse.Load(); id != nil && *id == r.Header.Get(signature.HeaderID) {
			http.Error(w, "refused", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if check != nil {
			if err := check(r.Header, body); err != nil {
				t.Errorf("receiver refused a delivery: %v", err)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
		}
		got := received{id: r.Header.Get(signature.HeaderID), header: r.Header.Clone(), body: body}
		rc.mu.Lock()
		rc.got = append(rc.got, got)
		rc.mu.Unlock()
		rc.seen <- got
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// next waits for the next accepted delivery.
func (rc *receiver) next(t *testing.T, within time.Duration) received {
	t.Helper()
	select {
	case r := <-rc.seen:
		return r
	case <-time.After(within):
		t.Fatalf("no delivery within %s", within)
		return received{}
	}
}

// none checks that nothing more arrives for d (the absence of a doubled
// notification can only be observed over some time).
func (rc *receiver) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case r := <-rc.seen:
		t.Fatalf("unexpected delivery %s: %s", r.id, r.body)
	case <-time.After(d):
	}
}
