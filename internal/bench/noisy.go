package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// The noisy-neighbour scenario (issue 18): tenant A floods at NoisyFlood
// times its emit limit with NoisyCallers concurrent callers, while tenant B
// emits NoisyBRate events/s, one per unary Emit, repeating NoisyBKeys
// series keys, to NoisyWatchers watchers of its own.
const (
	NoisyALimit   = 1000 // A's events/s (--tenant-emit-rate; B stays far under it)
	NoisyFlood    = 5
	NoisyCallers  = 50 // as ghz's default concurrency
	NoisyBatch    = 10
	NoisyBRate    = 50
	NoisyBKeys    = 20
	NoisyWatchers = 100
)

// NoisyArgs are the gateway flags of the scenario: every tenant may emit
// NoisyALimit events/s, in bursts of one largest batch.
func NoisyArgs() []string {
	return []string{"--tenant-emit-rate", strconv.Itoa(NoisyALimit), "--tenant-emit-burst", "1000"}
}

// Noisy is one run of tenant B, alone or beside A's flood.
type Noisy struct {
	BAck   []float64 // ms, unary Emit of one event
	BWatch []float64 // ms, eventTime stamped at send → received, every watcher
	BSent  int       // B's events acknowledged
	BFail  int       // B's calls that failed
	// BCreated are B's events stored as new, each delivered ADDED to every
	// watcher.
	BCreated int
	// A's answers, in calls: OK, ResourceExhausted with RetryInfo, other
	// (errors and timeouts).
	AOK, ALimited, AOther int
	AOffered              int // events
}

// RunNoisy runs B for d with its watchers, beside A emitting aFactor times
// its limit (0: B alone); tenants are named after run so that runs do not
// share series. It is one measurement, kept whole: B's watchers and
// emitter and A's flood run as goroutines that share res, its lock and the
// record switch.
func RunNoisy(ctx context.Context, g *Gateway, run string, aFactor int, d time.Duration) (*Noisy, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &eventgatev1.Tenant{Type: "project", Name: "noisy-b-" + run}
	a := &eventgatev1.Tenant{Type: "project", Name: "noisy-a-" + run}
	res := &Noisy{}
	var mu sync.Mutex
	record := true

	conn, err := g.Conn()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	watchClient := eventgatev1.NewEventServiceClient(conn)
	var wg sync.WaitGroup
	defer func() { // every goroutine ends before res is handed over
		cancel()
		wg.Wait()
	}()
	for i := 0; i < NoisyWatchers; i++ {
		s, err := watchClient.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Tenant: b})
		if err != nil {
			return nil, notBuilt(err)
		}
		if _, err := s.Header(); err != nil {
			return nil, fmt.Errorf("watch %d: %w", i, notBuilt(err))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := s.Recv()
				if err != nil {
					return
				}
				if r.GetObject().GetEventTime() == nil || r.GetObject().GetSeries() != nil {
					continue // a series' later versions carry the first time
				}
				l := float64(time.Since(r.Object.EventTime.AsTime())) / float64(time.Millisecond)
				mu.Lock()
				if record {
					res.BWatch = append(res.BWatch, l)
				}
				mu.Unlock()
			}
		}()
	}

	if aFactor > 0 {
		aConn, err := g.Conn()
		if err != nil {
			return nil, err
		}
		defer aConn.Close()
		aClient := eventgatev1.NewEventServiceClient(aConn)
		perCaller := NoisyALimit * aFactor / NoisyBatch / NoisyCallers // calls/s
		for c := 0; c < NoisyCallers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = Pace(ctx, perCaller, d, func(n int) error {
					for range n {
						evs := make([]*eventgatev1.Event, NoisyBatch)
						now := timestamppb.Now()
						for i := range evs {
							evs[i] = &eventgatev1.Event{EventTime: now, Reason: "Flood", Type: "Normal",
								ReportingController: "flood", Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Name: "flood-" + strconv.Itoa(c) + "-" + strconv.Itoa(i)}}
						}
						cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
						_, err := aClient.Emit(cctx, &eventgatev1.EmitRequest{Tenant: a, Events: evs})
						ccancel()
						mu.Lock()
						res.AOffered += NoisyBatch
						switch {
						case err == nil:
							res.AOK++
						case limitedWithRetry(err):
							res.ALimited++
						case ctx.Err() == nil:
							res.AOther++
						}
						mu.Unlock()
					}
					return nil
				})
			}()
		}
	}

	bClient := eventgatev1.NewEventServiceClient(conn)
	i := 0
	_, err = Pace(ctx, NoisyBRate, d, func(n int) error {
		for range n {
			// Every fifth event repeats one of NoisyBKeys series keys; the
			// others are new (emit→watch is measured on them).
			name := "b-" + strconv.Itoa(i)
			if i%5 == 0 {
				name = "b-rep-" + strconv.Itoa(i/5%NoisyBKeys)
			}
			ev := &eventgatev1.Event{EventTime: timestamppb.Now(), Reason: "BackOff", Type: "Warning", Action: "Restart",
				ReportingController: "kubelet", ReportingInstance: "node-1",
				Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "b", Name: name},
				Note:      "Back-off restarting failed container in pod " + name + noteTail}
			i++
			start := time.Now()
			resp, err := bClient.Emit(ctx, &eventgatev1.EmitRequest{Tenant: b, Events: []*eventgatev1.Event{ev}})
			mu.Lock()
			if err != nil {
				res.BFail++
			} else {
				res.BSent++
				res.BAck = append(res.BAck, float64(time.Since(start))/float64(time.Millisecond))
				if resp.GetResults()[0].GetOutcome() == eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
					res.BCreated++
				}
			}
			mu.Unlock()
		}
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	// The last events reach the watchers shortly after their acks.
	_ = WaitFor(ctx, 10*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(res.BWatch) >= res.BCreated*NoisyWatchers, nil
	})
	mu.Lock()
	record = false
	mu.Unlock()
	cancel()
	return res, nil
}

// limitedWithRetry reports a ResourceExhausted refusal that says when to
// retry.
func limitedWithRetry(err error) bool {
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		return false
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// noisy runs the noisy-neighbour section on a gateway of its own (a fresh
// data directory, NoisyArgs): each run measures B alone, then beside A's
// flood. It is kept whole: the runs and their report share the samples.
func (r *runner) noisy(ctx context.Context) {
	sc := r.cfg.Scale
	dir := filepath.Join(r.cfg.WorkDir, "noisy")
	g, err := StartGateway(ctx, r.cfg.GatewayBin, dir, filepath.Join(r.cfg.WorkDir, "gateway-noisy.log"), NoisyArgs()...)
	if err != nil {
		r.rep.Failed(SecNoisy, "B ack p99 flood ÷ solo", "ratio", Below(2), err)
		return
	}
	defer g.Stop()
	// Each run: B alone, B beside A at exactly its limit (the floor: what
	// A may do costs B that much however well its excess is refused), and
	// B beside A's flood.
	var solo, atLimit, flood []*Noisy
	type bRun struct {
		tenant string
		sent   int
	}
	var bRuns []bRun
	for i := 0; i < sc.Runs; i++ {
		for _, factor := range []int{0, 1, NoisyFlood} {
			run := fmt.Sprintf("%d-%d", i, factor)
			n, err := RunNoisy(ctx, g, run, factor, sc.LatencyDuration)
			if err != nil {
				r.rep.Failed(SecNoisy, "B ack p99 flood ÷ solo", "ratio", Below(2), err)
				return
			}
			r.logf("noisy run %s: B %d acked (%d failed), ack p99 %.1f ms, emit→watch p99 %.1f ms over %d deliveries; A %d events offered: %d calls OK, %d limited, %d other",
				run, n.BSent, n.BFail, Percentile(n.BAck, 0.99), Percentile(n.BWatch, 0.99), len(n.BWatch), n.AOffered, n.AOK, n.ALimited, n.AOther)
			bRuns = append(bRuns, bRun{"noisy-b-" + run, n.BSent})
			switch factor {
			case 0:
				solo = append(solo, n)
			case 1:
				atLimit = append(atLimit, n)
			default:
				flood = append(flood, n)
			}
		}
	}
	var ackSolo, ackLimit, ackFlood, ackLimitRatio, ackRatio, watchSolo, watchLimit, watchFlood, watchLimitRatio, watchRatio, limitedShare, other []float64
	for i := range flood {
		as, al, af := Percentile(solo[i].BAck, 0.99), Percentile(atLimit[i].BAck, 0.99), Percentile(flood[i].BAck, 0.99)
		ws, wl, wf := Percentile(solo[i].BWatch, 0.99), Percentile(atLimit[i].BWatch, 0.99), Percentile(flood[i].BWatch, 0.99)
		ackSolo, ackLimit, ackFlood = append(ackSolo, as), append(ackLimit, al), append(ackFlood, af)
		ackLimitRatio, ackRatio = append(ackLimitRatio, al/as), append(ackRatio, af/as)
		watchSolo, watchLimit, watchFlood = append(watchSolo, ws), append(watchLimit, wl), append(watchFlood, wf)
		watchLimitRatio, watchRatio = append(watchLimitRatio, wl/ws), append(watchRatio, wf/ws)
		calls := flood[i].AOK + flood[i].ALimited + flood[i].AOther
		limitedShare = append(limitedShare, float64(flood[i].ALimited)/float64(max(calls, 1)))
		other = append(other, float64(flood[i].AOther+atLimit[i].AOther+solo[i].BFail+atLimit[i].BFail+flood[i].BFail))
	}
	note := fmt.Sprintf("A floods %d events/s (%d× its limit of %d/s) with %d callers of %d events; B emits %d events/s, one per Emit, to %d watchers; %v per run",
		NoisyALimit*NoisyFlood, NoisyFlood, NoisyALimit, NoisyCallers, NoisyBatch, NoisyBRate, NoisyWatchers, sc.LatencyDuration)
	r.rep.Add(SecNoisy, "B ack p99, alone", "ms", ackSolo, nil, note)
	r.rep.Add(SecNoisy, "B ack p99, beside A at its limit", "ms", ackLimit, nil, fmt.Sprintf("A emits %d events/s, all allowed: the floor of the flood's figure", NoisyALimit))
	r.rep.Add(SecNoisy, "B ack p99, beside A's flood", "ms", ackFlood, nil, "")
	r.rep.Add(SecNoisy, "B ack p99 at limit ÷ solo (floor)", "ratio", ackLimitRatio, nil, "")
	r.rep.Add(SecNoisy, "B ack p99 flood ÷ solo", "ratio", ackRatio, Below(2), "")
	r.rep.Add(SecNoisy, "B emit→watch p99, alone", "ms", watchSolo, nil, "every watcher of B, events stored as new")
	r.rep.Add(SecNoisy, "B emit→watch p99, beside A at its limit", "ms", watchLimit, nil, "")
	r.rep.Add(SecNoisy, "B emit→watch p99, beside A's flood", "ms", watchFlood, nil, "")
	r.rep.Add(SecNoisy, "B emit→watch p99 at limit ÷ solo (floor)", "ratio", watchLimitRatio, nil, "")
	r.rep.Add(SecNoisy, "B emit→watch p99 flood ÷ solo", "ratio", watchRatio, Below(2), "")
	r.rep.Add(SecNoisy, "A calls answered ResourceExhausted + RetryInfo", "share", limitedShare, nil, "the rest were accepted")
	r.rep.Add(SecNoisy, "A errors and timeouts, B failures", "calls", other, Below(1), "anything but OK or ResourceExhausted with RetryInfo")

	// B's series counts reach the store with the next flush.
	flush := config.Default().Intake.Series.FlushInterval
	exact := 0.0
	for _, b := range bRuns {
		var got int64
		err := waitEvery(ctx, flush+time.Minute, time.Second, func() (bool, error) {
			_, c, err := StormCounts(ctx, g, b.tenant)
			got = c
			return c >= int64(b.sent), err
		})
		if err != nil || got != int64(b.sent) {
			exact++
			r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("noisy %s: stored counts add up to %d of %d occurrences (%v)", b.tenant, got, b.sent, err))
		}
	}
	r.rep.Add(SecNoisy, "B runs whose series counts are not exact", "runs", []float64{exact}, Below(1), "stored series counts of B add up to its acknowledged occurrences")
}
