package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// QueryablePoll is how often the latency phase asks Query for its
// resourceVersion: the resolution of emit→queryable. Each ask costs the
// gateway a JetStream consumer-info request, so it is not polled harder.
const QueryablePoll = 10 * time.Millisecond

// Latencies is one paced run: per-sample latencies in milliseconds.
type Latencies struct {
	Rate       int         // offered events/s
	StreamAck  []float64   // EmitStream batch: send → ack
	StreamSent []time.Time // when each StreamAck's batch was sent
	UnaryAck   []float64   // unary Emit of one event, alongside the load
	Watch      []float64   // eventTime (stamped at send) → received by its watcher (ADDED only)
	Queryable  []float64   // batch send → Query's resourceVersion covers it
	Created    int         // events stored as new: each is delivered ADDED to one watcher
	Delivered  int
	Overflowed int // watchers ended as too slow
	// Stages: the p99 of each of the gateway's Stages over the run, in ms
	// ("" when /metrics could not be read).
	Stages string
}

// Watchers are n StreamWatch calls, watcher i on tenant i of the workload
// (so every event is delivered to exactly one), over conns connections.
type Watchers struct {
	mu        sync.Mutex
	lat       []float64
	delivered int
	overflow  int
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	conns     []*grpc.ClientConn
	recording bool
}

// StartWatchers opens the watches and returns once each is established.
func StartWatchers(ctx context.Context, g *Gateway, n, conns int) (*Watchers, error) {
	ctx, cancel := context.WithCancel(ctx)
	ws := &Watchers{cancel: cancel}
	for c := 0; c < conns; c++ {
		conn, err := g.Conn()
		if err != nil {
			ws.Stop()
			return nil, err
		}
		ws.conns = append(ws.conns, conn)
	}
	for i := 0; i < n; i++ {
		client := eventgatev1.NewEventServiceClient(ws.conns[i%conns])
		s, err := client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{
			Tenant: &eventgatev1.Tenant{Type: "project", Name: TenantName(i)},
		})
		if err != nil {
			ws.Stop()
			return nil, fmt.Errorf("watch %d: %w", i, notBuilt(err))
		}
		if _, err := s.Header(); err != nil {
			ws.Stop()
			return nil, fmt.Errorf("watch %d: %w", i, notBuilt(err))
		}
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			for {
				r, err := s.Recv()
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, io.EOF) {
						ws.mu.Lock()
						ws.overflow++
						ws.mu.Unlock()
					}
					return
				}
				if r.Type != "ADDED" || r.Object.GetEventTime() == nil {
					continue
				}
				l := float64(time.Since(r.Object.EventTime.AsTime())) / float64(time.Millisecond)
				ws.mu.Lock()
				if ws.recording {
					ws.lat = append(ws.lat, l)
					ws.delivered++
				}
				ws.mu.Unlock()
			}
		}()
	}
	return ws, nil
}

// Record starts a fresh recording and returns what the previous one saw.
func (ws *Watchers) Record(on bool) (lat []float64, delivered, overflow int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	lat, delivered, overflow = ws.lat, ws.delivered, ws.overflow
	ws.lat, ws.delivered, ws.recording = nil, 0, on
	return lat, delivered, overflow
}

func (ws *Watchers) count() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.delivered
}

// Stop ends every watch.
func (ws *Watchers) Stop() {
	ws.cancel()
	ws.wg.Wait()
	for _, c := range ws.conns {
		c.Close()
	}
}

// RunLatency offers rate events/s through EmitStream for d (batches every
// Tick) while the watchers record, a unary Emit of one event runs every
// 50 ms alongside, and Query's resourceVersion is polled, then waits until
// every batch is queryable and every created event delivered. It is one
// measurement, kept whole: the acknowledgements, the queryable poll, the
// unary probe and the sender share the send times, the pending batches and
// out under one lock, so a run's timing reads in one place.
func RunLatency(ctx context.Context, g *Gateway, ws *Watchers, w *Workload, rate int, d time.Duration) (*Latencies, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &Latencies{Rate: rate}
	stages0, stagesErr := g.StageHistograms(ctx)
	ws.Record(true)
	stream, err := g.Events.EmitStream(ctx)
	if err != nil {
		return nil, notBuilt(err)
	}
	type sent struct {
		at time.Time
		rv uint64
	}
	var mu sync.Mutex
	var inflight []time.Time // send times, acks come in order
	var pending []sent       // acknowledged batches not yet seen queryable
	var res results
	recvErr := receiveAcks(stream, func(err error) error { return err }, func(r *eventgatev1.EmitStreamResponse) {
		now := time.Now()
		res.add(r.Results)
		mu.Lock()
		at := inflight[0]
		inflight = inflight[1:]
		out.StreamAck = append(out.StreamAck, float64(now.Sub(at))/float64(time.Millisecond))
		out.StreamSent = append(out.StreamSent, at)
		if rv := maxRV(r.Results); rv > 0 {
			pending = append(pending, sent{at: at, rv: rv})
		}
		mu.Unlock()
	})
	// Queryable: poll the floor; every pending batch at or below it is
	// queryable now.
	pollDone := make(chan error, 1)
	stopPoll := make(chan struct{})
	go func() {
		for {
			f, err := g.AckFloor(ctx)
			if err != nil {
				pollDone <- err
				return
			}
			now := time.Now()
			mu.Lock()
			k := 0
			for _, p := range pending {
				if p.rv <= f {
					out.Queryable = append(out.Queryable, float64(now.Sub(p.at))/float64(time.Millisecond))
				} else {
					pending[k] = p
					k++
				}
			}
			pending = pending[:k]
			mu.Unlock()
			select {
			case <-stopPoll:
				pollDone <- nil
				return
			case <-time.After(QueryablePoll):
			}
		}
	}()
	// Unary probe.
	probeDone := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		end := time.Now().Add(d)
		for now := range t.C {
			if now.After(end) {
				probeDone <- nil
				return
			}
			start := time.Now()
			resp, err := g.Events.Emit(ctx, &eventgatev1.EmitRequest{Events: w.Batch(rng, 1)})
			if err != nil {
				probeDone <- fmt.Errorf("unary probe: %w", err)
				return
			}
			res.add(resp.Results)
			mu.Lock()
			out.UnaryAck = append(out.UnaryAck, float64(time.Since(start))/float64(time.Millisecond))
			mu.Unlock()
		}
	}()
	rng := rand.New(rand.NewPCG(13, uint64(time.Now().UnixNano())))
	batch := 0
	_, err = Pace(ctx, rate, d, func(n int) error {
		for n > 0 {
			k := min(n, 500)
			n -= k
			req := &eventgatev1.EmitStreamRequest{BatchId: strconv.Itoa(batch), Events: w.Batch(rng, k)}
			batch++
			mu.Lock()
			inflight = append(inflight, time.Now())
			mu.Unlock()
			if err := stream.Send(req); err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, fmt.Errorf("close send: %w", err)
	}
	if err := <-recvErr; err != nil {
		return nil, fmt.Errorf("emit stream: %w", err)
	}
	if err := <-probeDone; err != nil {
		return nil, err
	}
	err = WaitFor(ctx, 2*time.Minute, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(pending) == 0, nil
	})
	close(stopPoll)
	if perr := <-pollDone; perr != nil {
		return nil, fmt.Errorf("poll resourceVersion: %w", perr)
	}
	if err != nil {
		return nil, fmt.Errorf("wait until queryable: %w", err)
	}
	res.mu.Lock()
	out.Created = res.created
	res.mu.Unlock()
	// Every created event reaches its watcher (or the wait times out and
	// the shortfall is reported).
	_ = WaitFor(ctx, 30*time.Second, func() (bool, error) { return ws.count() >= out.Created, nil })
	out.Watch, out.Delivered, out.Overflowed = ws.Record(false)
	if stages1, err := g.StageHistograms(ctx); err == nil && stagesErr == nil {
		out.Stages = StageP99s(stages0, stages1)
	}
	return out, nil
}

// Stalls describes when the slowest batch acknowledgements were sent: for
// each second of the run holding one of the slowest 1% (at most 5), its
// offset from the first send (whose wall time it gives, to line the
// seconds up with the gateway's own logs), how many it holds and the worst. A tail
// that comes from one stall (a pause of the process, a periodic task)
// shows as one or two seconds; a tail from steady queueing, as many.
func (l *Latencies) Stalls() string {
	if len(l.StreamAck) == 0 {
		return ""
	}
	p99 := Percentile(l.StreamAck, 0.99)
	type second struct {
		n     int
		worst float64
	}
	secs := map[int]*second{}
	t0 := l.StreamSent[0]
	for i, ms := range l.StreamAck {
		if ms < p99 {
			continue
		}
		k := int(l.StreamSent[i].Sub(t0) / time.Second)
		if secs[k] == nil {
			secs[k] = &second{}
		}
		secs[k].n++
		secs[k].worst = max(secs[k].worst, ms)
	}
	keys := make([]int, 0, len(secs))
	for k := range secs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, 5)
	for _, k := range keys {
		if len(parts) == 5 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("+%ds: %d (worst %.0f ms)", k, secs[k].n, secs[k].worst))
	}
	return fmt.Sprintf("slowest 1%% of batch acks (≥ %.0f ms) sent in %d second(s) after %s: %s",
		p99, len(secs), t0.UTC().Format("15:04:05.000"), strings.Join(parts, ", "))
}
