package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// The rules section (issue 21): BenchRules rules over the live feed, one
// per workload tenant, while the latency phase's load runs. Every rule
// asks for each Warning of its tenant with one team label; one rule in ten
// names a team its tenant has (it fires for about one event in 21 of its
// tenant's), the others one it never has (evaluated, never firing), as
// most rules are quiet most of the time. Each notification goes to a
// webhook receiver in this process, which measures how long after the
// triggering event's eventTime it arrives.
const BenchRules = 1000

// notifyReceiver is the rules' webhook destination.
type notifyReceiver struct {
	srv *http.Server
	url string

	mu        sync.Mutex
	recording bool
	lat       []float64 // ms, eventTime → received
	stored    []float64 // ms, the event stored (the notification's time) → received
	probe     map[string]bool
}

func startNotifyReceiver() (*notifyReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("notification receiver: %w", err)
	}
	r := &notifyReceiver{url: "http://" + ln.Addr().String() + "/notify", probe: map[string]bool{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *notifyReceiver) serve(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var n struct {
		State string    `json:"state"`
		Time  time.Time `json:"time"` // when the event was stored (log time)
		Event struct {
			UID       string          `json:"uid"`
			Reason    string          `json:"reason"`
			EventTime time.Time       `json:"eventTime"`
			Series    json.RawMessage `json:"series"`
		} `json:"event"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	if n.Event.Reason == "RulesProbe" {
		r.probe[n.Event.UID] = true
	} else if r.recording && !n.Event.EventTime.IsZero() && len(n.Event.Series) == 0 {
		// A series' versions keep its first eventTime and are written at
		// its flushes: only events stored as new time the notification.
		r.lat = append(r.lat, float64(now.Sub(n.Event.EventTime))/float64(time.Millisecond))
		r.stored = append(r.stored, float64(now.Sub(n.Time))/float64(time.Millisecond))
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// record starts a fresh recording and returns what the previous one saw:
// the latencies from the events' eventTime and from their storing.
func (r *notifyReceiver) record(on bool) (lat, stored []float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lat, stored = r.lat, r.stored
	r.lat, r.stored, r.recording = nil, nil, on
	return lat, stored
}

func (r *notifyReceiver) sawProbe(uid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.probe[uid]
}

func (r *notifyReceiver) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// rules measures emit→watch at the latency phase's rate without rules, with
// BenchRules rules and with a control, and how soon after its event each
// notification arrives. It reads as the section's protocol, kept whole: the
// windows, then the report, sharing the receiver, the watchers and the
// samples.
//
// On two shared cores a run's p99 moves by half or more from one run to
// the next with nothing changed, and it drifts up over the section as the
// store grows (the engine's merges), by several times on a fresh store:
// far more than the 10% the section is to resolve. So the windows with rules
// and with the control (in turn, four times as many of each as a figure has
// runs) each sit between two windows without rules, which a linear drift
// moves as much as the window between them: each is compared with the
// mean of its two neighbours, and the figure is the median of those
// ratios (the p99s of all the samples of a kind together are shown too).
func (r *runner) rules(ctx context.Context, g *Gateway, rate int) {
	sc := r.cfg.Scale
	fail := func(err error) {
		r.rep.Failed(SecRules, "emit→watch p99 with rules ÷ without", "ratio", Below(1.1), err)
	}
	recv, err := startNotifyReceiver()
	if err != nil {
		fail(err)
		return
	}
	defer recv.stop()
	ws, err := StartWatchers(ctx, g, sc.Watchers, 10)
	if err != nil {
		fail(err)
		return
	}
	defer ws.Stop()
	window := sc.LatencyDuration * 2 / 5
	// One window's figures: its emit→watch samples and their p99, and the
	// gateway's CPU seconds (all of it, and its Go threads).
	type measured struct {
		samples         []float64
		p99, cpu, goCPU float64
	}
	var notify, afterStored []float64
	var notified int
	run := func(name string, i int) (*measured, bool) {
		cpu0, cerr := g.CPUTime()
		split0, serr := g.CPU()
		// With -profile, every window is sampled (pprof, the same overhead
		// in all): one window's profile is a few seconds of a noisy
		// machine, those of a kind merged are a comparison.
		var profiled chan error
		path := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("cpu.%s.%d.pb.gz", name, i+1))
		if r.cfg.Profile {
			profiled = make(chan error, 1)
			go func() { profiled <- g.SaveCPUProfile(ctx, window, path) }()
		}
		l, err := RunLatency(ctx, g, ws, NewWorkload(name+strconv.Itoa(i)), rate, window)
		m := &measured{}
		if cpu1, err := g.CPUTime(); err == nil && cerr == nil {
			m.cpu = (cpu1 - cpu0).Seconds()
		}
		if split1, err := g.CPU(); err == nil && serr == nil {
			d := split1.Sub(split0)
			m.goCPU = d.Go.Seconds()
			r.logf("rules: window %d %s: the gateway's Go threads used %.2f s of CPU, the engine's %.2f s", i+1, name, d.Go.Seconds(), d.Engine.Seconds())
		}
		if profiled != nil {
			if perr := <-profiled; perr != nil {
				r.logf("rules: CPU profile: %v", perr)
			} else {
				r.logf("rules: CPU profile of window %d %s: %s", i+1, name, path)
			}
		}
		if err != nil {
			fail(err)
			return nil, false
		}
		if l.Stages != "" {
			r.logf("rules: window %d %s: the gateway's stages, p99 ms: %s", i+1, name, l.Stages)
		}
		m.samples, m.p99 = l.Watch, Percentile(l.Watch, 0.99)
		r.logf("rules: window %d %s: emit→watch p99 %.1f ms over %d events", i+1, name, m.p99, len(l.Watch))
		return m, true
	}
	conn, err := g.Conn()
	if err != nil {
		fail(err)
		return
	}
	defer conn.Close()
	rc := eventgatev1.NewRulesServiceClient(conn)
	withRules := func(i int) (*measured, bool) {
		if err := r.createBenchRules(ctx, g, rc, recv); err != nil {
			fail(err)
			return nil, false
		}
		_, _ = recv.record(true)
		m, ok := run("rules", i)
		// Notifications of the window's last events arrive after it (a
		// rule deleted takes its queue along); one later than this grace
		// would be far past the 1 s target anyway.
		time.Sleep(3 * time.Second)
		lat, stored := recv.record(false)
		if !ok {
			return nil, false
		}
		notified += len(lat)
		if len(lat) > 0 {
			notify = append(notify, Percentile(lat, 0.99))
			afterStored = append(afterStored, Percentile(stored, 0.99))
		}
		r.logf("rules: window %d: %d notifications, p99 %.1f ms after the event, %.1f ms after it was stored", i+1, len(lat), Percentile(lat, 0.99), Percentile(stored, 0.99))
		if err := r.deleteBenchRules(ctx, g, rc); err != nil {
			fail(err)
			return nil, false
		}
		return m, true
	}
	// The control: no rules, and a spinner in this process taking
	// SpinnerCores of the machine, about what the rules add to the
	// gateway's Go threads: how far the figure moves for that much CPU
	// spent on anything, on a machine this loaded.
	withSpinner := func(i int) (*measured, bool) {
		stop := spin(SpinnerCores)
		defer stop()
		return run("spinner", i)
	}
	// base[j] is the j-th window without rules; treated[j] the window
	// after it, rules on even j and the control on odd. Twelve of each at
	// full scale: with six, the median of the rules' windows moved
	// between 1.1 and 1.8 from one full run to the next while longer runs
	// of the same build gave 1.0–1.1 (sessions 26 and 32).
	n := 8 * sc.Runs
	if r.cfg.RulesWindows > 0 {
		n = r.cfg.RulesWindows
	}
	var base, treated []*measured
	for j := 0; j <= n; j++ {
		m, ok := run("norules", j)
		if !ok {
			return
		}
		base = append(base, m)
		if j == n {
			break
		}
		f := withRules
		if j%2 == 1 {
			f = withSpinner
		}
		if m, ok = f(j); !ok {
			return
		}
		treated = append(treated, m)
	}
	// Per kind (0 rules, 1 the control): the samples of all its windows,
	// and each window's figures over the mean of its two neighbours'.
	var pool [2][]float64
	var p99s, rel, cpu, goCPU [2][]float64
	var withoutP99s []float64
	for j, t := range treated {
		k := j % 2
		before, after := base[j], base[j+1]
		pool[k] = append(pool[k], t.samples...)
		p99s[k] = append(p99s[k], t.p99)
		rel[k] = append(rel[k], t.p99/((before.p99+after.p99)/2))
		cpu[k] = append(cpu[k], t.cpu/((before.cpu+after.cpu)/2))
		goCPU[k] = append(goCPU[k], t.goCPU/((before.goCPU+after.goCPU)/2))
	}
	var without []float64 // all the samples without rules
	for _, b := range base {
		without = append(without, b.samples...)
		withoutP99s = append(withoutP99s, b.p99)
	}
	p99w := Percentile(without, 0.99)
	note := fmt.Sprintf("%s events/s offered as in the latency phase, %d watchers; rule i: tenant i, type=Warning and one team label, every matching event (one rule in ten can fire), to a webhook in the bench. %d windows of %s without rules, between each two a window with rules or the control in turn; the value is the p99 of all the windows' samples together, the runs each window's", thousands(int64(rate)), sc.Watchers, len(base), window)
	r.rep.AddValue(SecRules, "emit→watch p99 without rules", "ms", p99w, withoutP99s, nil, note)
	r.rep.AddValue(SecRules, fmt.Sprintf("emit→watch p99 with %d rules", BenchRules), "ms", Percentile(pool[0], 0.99), p99s[0], nil,
		"the rules created before each window (in force, and every rule that can fire notified once) and deleted after it")
	// The figure is the median of the windows' ratios to their neighbours:
	// a window's p99 rests on its few slowest moments, and one stall of
	// the machine in any window moves a p99 of the pooled samples by more
	// than the rules do (a pooled ratio of 0.75 with every window's ratio
	// at 1 or more, 19:51 UTC session 25).
	r.rep.Add(SecRules, "emit→watch p99 with rules ÷ without", "ratio", rel[0], Below(1.1),
		fmt.Sprintf("median of each window with rules: its p99 over the mean of its two neighbours' without rules (the runs); %s; the pooled p99s above: %.2f", spreadNote(rel[0]), Percentile(pool[0], 0.99)/p99w))
	r.rep.Add(SecRules, "emit→watch p99 without rules ÷ its neighbours", "ratio", aaRatios(withoutP99s), nil,
		"each window without rules but the first and last: its p99 over the mean of the windows without rules before and after it, an A/A of the figure above")
	if len(pool[1]) > 0 {
		r.rep.Add(SecRules, fmt.Sprintf("emit→watch p99 with a %.2f-core spinner ÷ without", SpinnerCores), "ratio", rel[1], nil,
			"no rules; a goroutine of the bench on a thread of its own spins that share of each 10 ms, about the Go CPU the rules add (the next rows): what that much CPU spent on anything does to the figure, the floor of rules that need it. As above, each window over its neighbours; "+spreadNote(rel[1]))
		if m := Median(rel[1]); m > 0 {
			r.rep.AddValue(SecRules, "emit→watch p99 with rules ÷ with the spinner", "ratio", Median(rel[0])/m, nil, nil,
				"the two medians above: the rules against the floor of their CPU (1: they cost the p99 what that much CPU spent on anything costs it)")
		}
	}
	r.rep.Add(SecRules, "gateway CPU a window with rules ÷ without", "ratio", cpu[0], nil,
		"user+system seconds of the gateway process during each window with rules (/proc/<pid>/stat) over the mean of its neighbours': steadier than a p99 on a shared machine")
	r.rep.Add(SecRules, "gateway Go CPU a window with rules ÷ without", "ratio", goCPU[0], nil,
		"the same for the gateway's Go threads alone (/proc/<pid>/task), where the rules run; the rest is the embedded engine's inserts and merges, whose share varies from window to window as the store grows")
	if len(notify) == 0 {
		r.rep.Failed(SecRules, "notification p99 after its event", "ms", Below(1000), errors.New("no notification arrived during the runs"))
		return
	}
	r.rep.Add(SecRules, "notification p99 after its event", "ms", notify, Below(1000), fmt.Sprintf("eventTime stamped at send → the webhook received it, for events stored as new (a series notifies at its flushes); %d such notifications", notified))
	r.rep.Add(SecRules, "notification p99 after its event was stored", "ms", afterStored, nil, "the notification's time (its event's timestamp in the events stream) → the webhook received it: the rules' and the delivery's part of the figure above, the rest being emit → stored")
}

// aaRatios is, for each window without rules but the first and the last,
// its p99 over the mean of the windows without rules before and after it
// (a window with rules or the control apart on each side).
func aaRatios(p99s []float64) []float64 {
	var out []float64
	for j := 1; j+1 < len(p99s); j++ {
		out = append(out, p99s[j]/((p99s[j-1]+p99s[j+1])/2))
	}
	return out
}

// spreadNote gives the geometric mean of ratios and a bootstrap 95%
// interval of it (resampling the windows, a fixed seed): how far a
// median of that many windows may be from what more would show.
func spreadNote(ratios []float64) string {
	g, lo, hi := geoMeanInterval(ratios, 2000)
	if len(ratios) == 0 {
		return "no windows"
	}
	return fmt.Sprintf("geometric mean %.2f, 95%% interval %.2f–%.2f", g, lo, hi)
}

// geoMeanInterval is the geometric mean of xs (all positive) and the 2.5th
// and 97.5th percentiles of the geometric means of n resamples of xs.
func geoMeanInterval(xs []float64, n int) (g, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	logs := make([]float64, len(xs))
	for i, x := range xs {
		logs[i] = math.Log(x)
	}
	mean := func(pick func() float64) float64 {
		sum := 0.0
		for range logs {
			sum += pick()
		}
		return math.Exp(sum / float64(len(logs)))
	}
	i := 0
	g = mean(func() float64 { i++; return logs[i-1] })
	rng := rand.New(rand.NewPCG(25, 26))
	means := make([]float64, n)
	for k := range means {
		means[k] = mean(func() float64 { return logs[rng.IntN(len(logs))] })
	}
	sort.Float64s(means)
	return g, means[int(0.025*float64(n))], means[min(n-1, int(0.975*float64(n)))]
}

// SpinnerCores is the CPU the rules section's control spends: about
// what 1,000 rules add to the gateway's Go threads at the latency phase's
// rate (1.04–1.10 times their ~0.9 core).
const SpinnerCores = 0.05

// spin keeps a thread of this process busy for cores of each 10 ms until
// the returned stop is called.
func spin(cores float64) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	busy := time.Duration(cores * float64(10*time.Millisecond))
	go func() {
		defer close(ended)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case start := <-t.C:
				for time.Since(start) < busy {
				}
			}
		}
	}()
	return func() { close(done); <-ended }
}

// createBenchRules creates the section's rules and waits until they are in
// force as rules long in place are: the gateway evaluates all of them, and
// every rule that can fire has notified a probe event of its tenant, so
// that its delivery queue (a durable consumer and a worker, made with a
// rule's first notification) is in place. A window that began before then
// would time the making of a hundred queues, which a rule does once.
func (r *runner) createBenchRules(ctx context.Context, g *Gateway, rc eventgatev1.RulesServiceClient, recv *notifyReceiver) error {
	start := time.Now()
	var firing []int // the rules that can fire
	for i := 0; i < BenchRules; i++ {
		tenant := &eventgatev1.Tenant{Type: "project", Name: TenantName(i)}
		team := "team-" + strconv.Itoa(i%30)
		if i%10 != 9 {
			team = "team-none"
		} else {
			firing = append(firing, i)
		}
		_, err := rc.CreateRule(ctx, &eventgatev1.CreateRuleRequest{Rule: &eventgatev1.Rule{
			Name: "bench-" + strconv.Itoa(i), Tenant: tenant,
			FieldSelector: "type=Warning", LabelSelector: "team=" + team,
			Condition:   &eventgatev1.Condition{Kind: &eventgatev1.Condition_Every{Every: &eventgatev1.EveryCondition{}}},
			Destination: &eventgatev1.Destination{Kind: &eventgatev1.Destination_Webhook{Webhook: &eventgatev1.WebhookDestination{Url: recv.url, Secret: "bench-webhook-secret-0123456789"}}},
		}})
		if err != nil {
			return fmt.Errorf("create rule %d: %w", i, notBuilt(err))
		}
	}
	created := time.Since(start)
	if err := WaitFor(ctx, 2*time.Minute, func() (bool, error) {
		n, err := g.Metric(ctx, "eventgate_rules_evaluated")
		return n == BenchRules, err
	}); err != nil {
		return fmt.Errorf("the rules were not evaluated within 2 minutes: %w", err)
	}
	// The probes go once every rule is taken in: one stored before a
	// rule's shard watched its tenant would not be evaluated by it.
	uids := make([]string, 0, len(firing))
	for _, i := range firing {
		probe := &eventgatev1.Event{EventTime: timestamppb.Now(), Reason: "RulesProbe", Type: "Warning", Action: "Probe",
			ReportingController: "bench", Labels: map[string]string{"team": "team-" + strconv.Itoa(i%30)},
			Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "probe", Name: "probe"}}
		resp, err := g.Events.Emit(ctx, &eventgatev1.EmitRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: TenantName(i)}, Events: []*eventgatev1.Event{probe}})
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		uids = append(uids, resp.GetResults()[0].GetUid())
	}
	if err := WaitFor(ctx, 2*time.Minute, func() (bool, error) {
		for _, uid := range uids {
			if !recv.sawProbe(uid) {
				return false, nil
			}
		}
		n, err := g.Metric(ctx, "eventgate_notify_queues_served")
		return n == float64(len(firing)), err
	}); err != nil {
		return fmt.Errorf("the rules that can fire had not all notified within 2 minutes: %w", err)
	}
	r.logf("rules: %d rules created in %v, in force and the %d that can fire notified %v after the first", BenchRules, created.Round(time.Millisecond), len(firing), time.Since(start).Round(time.Millisecond))
	return nil
}

// deleteBenchRules deletes the section's rules and waits until the
// gateway evaluates none and serves no delivery queue (a rule's goes with
// it).
func (r *runner) deleteBenchRules(ctx context.Context, g *Gateway, rc eventgatev1.RulesServiceClient) error {
	for i := 0; i < BenchRules; i++ {
		if _, err := rc.DeleteRule(ctx, &eventgatev1.DeleteRuleRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: TenantName(i)}, Name: "bench-" + strconv.Itoa(i)}); err != nil {
			return fmt.Errorf("delete rule %d: %w", i, err)
		}
	}
	return WaitFor(ctx, 2*time.Minute, func() (bool, error) {
		n, err := g.Metric(ctx, "eventgate_rules_evaluated")
		if err != nil || n != 0 {
			return false, err
		}
		n, err = g.Metric(ctx, "eventgate_notify_queues_served")
		return n == 0, err
	})
}
