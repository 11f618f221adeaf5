package gateway

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// A shutdown runs against one deadline, ShutdownTimeout (T) after it
// starts (Serve's context ends: SIGTERM), so that whatever runs it (the
// kubelet, with terminationGracePeriodSeconds) can count on it:
//
//	0 ........ drainBy ............................ stepsBy ........ T
//	servers drain | rules, intake checkpoint, ingest batch | connections
//	              |          (side by side)                | telemetry
//
// The servers' drain (requests and emit batches in flight; watches are
// told to end) takes at most half of what precedes stepsBy; whatever it
// leaves, the rules, the intake and the ingest share, and stepsBy leaves
// closeReserve for draining the NATS connections and flushing telemetry.
// A step still running at its share's end is left as a crash would leave
// it, which each survives: a request cut gets no answer (its client
// retries; an emit's id makes the retry idempotent), an intake partition
// not checkpointed is replayed from its last checkpoint by whichever
// replica takes it over, and an ingest batch not acknowledged is delivered
// again and its insert deduplicated. After T only local closing remains
// (the embedded NATS server's and engine's files), bounded by
// localCloseGrace; the chart's terminationGraceExtraSeconds covers it.
type shutdownPlan struct {
	start, drainBy, stepsBy, deadline time.Time
}

// localCloseGrace bounds the local closing after the deadline.
const localCloseGrace = 5 * time.Second

func planShutdown(start time.Time, timeout time.Duration) shutdownPlan {
	reserve := min(time.Second, timeout/10)
	return shutdownPlan{
		start:    start,
		drainBy:  start.Add((timeout - reserve) / 2),
		stepsBy:  start.Add(timeout - reserve),
		deadline: start.Add(timeout),
	}
}

// shutdownPlan returns the plan of this gateway's shutdown, made at the
// first call: at the start of stop, or of Close when the gateway never
// served.
func (g *Gateway) shutdownPlan() shutdownPlan {
	g.planOnce.Do(func() { g.plan = planShutdown(time.Now(), g.cfg.ShutdownTimeout) })
	return g.plan
}

// watchGrace is how long watches get to end on their own once told to, at
// shutdown, before their connections are cut: a watcher that stopped
// reading is blocked in a send that only a closed connection ends.
const watchGrace = time.Second

// stop drains the servers: watches are told to end (their clients
// reconnect elsewhere) and emit streams to stop taking batches, in-flight
// requests and the batches taken finish, until the plan's drainBy; then
// whatever is still open (watchers that do not read) is cut.
func (g *Gateway) stop() {
	plan := g.shutdownPlan()
	g.log.Info("shutting down", "timeout", g.cfg.ShutdownTimeout)
	g.health.Shutdown()
	g.hub.Stop()
	g.events.Drain()
	ctx, cancel := context.WithDeadline(context.Background(), plan.drainBy)
	defer cancel()
	done := make(chan struct{})
	go func() {
		_ = g.httpSrv.Shutdown(ctx)
		g.grpc.GracefulStop()
		g.grpcInproc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-g.calls.idle():
	case <-ctx.Done():
	}
	// Every request and emit stream has ended (or the time is up): the
	// watches get a moment more.
	grace := time.NewTimer(watchGrace)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	case <-ctx.Done():
	}
	g.log.Info("closing the connections still open (watchers that do not read, reflection streams, calls past the drain's share of the shutdown timeout)")
	_ = g.httpSrv.Close()
	g.grpc.Stop()
	g.grpcInproc.Stop()
	<-done
}

// callTracker counts the calls in flight whose end matters at shutdown:
// requests and emit streams (acknowledgements to deliver). Watches end on
// their own only if their clients read, and other streams (reflection, the
// health service's Watch) carry nothing to finish.
type callTracker struct {
	mu     sync.Mutex
	n      int
	waiter chan struct{} // closed when n reaches 0
}

func (c *callTracker) begin() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *callTracker) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 && c.waiter != nil {
		close(c.waiter)
		c.waiter = nil
	}
}

// idle is closed once no call is in flight.
func (c *callTracker) idle() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if c.n == 0 {
		close(ch)
	} else {
		c.waiter = ch
	}
	return ch
}

func (c *callTracker) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c.begin()
	defer c.end()
	return h(ctx, req)
}

func (c *callTracker) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod != eventgatev1.EventService_EmitStream_FullMethodName {
		return h(srv, ss)
	}
	c.begin()
	defer c.end()
	return h(srv, ss)
}

// Close releases everything New acquired, within the shutdown plan (see
// shutdownPlan). It is safe to call more than once.
func (g *Gateway) Close() {
	if g == nil {
		return
	}
	g.closeOnce.Do(func() {
		plan := g.shutdownPlan()
		if g.hub != nil {
			g.hub.Stop()
		}
		ctx, cancel := context.WithDeadline(context.Background(), plan.stepsBy)
		defer cancel()
		steps := map[string]<-chan struct{}{"rules": goDone(g.stopRules)}
		if g.intake != nil {
			// Checkpoint the partitions this replica owns so another takes
			// them over without replaying much.
			steps["intake"] = goDone(func() {
				if err := g.intake.Stop(ctx); err != nil {
					g.log.Warn("intake stop", "err", err)
				}
			})
		}
		if g.ingest != nil {
			// Insert and acknowledge the batch in hand. The ingest's Stop
			// waits for an insert that a cancel cannot end (the embedded
			// engine's), hence the step's own bound.
			steps["ingest"] = goDone(func() {
				if err := g.ingest.Stop(ctx); err != nil {
					g.log.Warn("ingest stop", "err", err)
				}
			})
		}
		t0 := time.Now()
		left := waitSteps(plan.stepsBy, steps)
		tSteps := time.Now()
		if len(left) > 0 {
			g.log.Warn("shutdown steps cut at their share of the shutdown timeout; what they left is taken up as after a crash",
				"steps", strings.Join(left, ","))
		}
		if g.proxy != nil {
			_ = g.proxy.Close()
		}
		ncs := g.paths.conns()
		if g.nc != nil {
			ncs = append(ncs, g.nc)
		}
		drainBy(plan.deadline, ncs...)
		tConns := time.Now()
		tctx, tcancel := context.WithDeadline(context.Background(), plan.deadline)
		defer tcancel()
		for i := len(g.shutdown) - 1; i >= 0; i-- {
			_ = g.shutdown[i](tctx)
		}
		// Local closing: the embedded server's and engine's files. An
		// engine whose ingest is still inserting is left open: closing
		// waits for the insert, and the process exits (as after a crash,
		// which the insert's replay makes good).
		_, storeBusy := steps["ingest"]
		storeBusy = storeBusy && !closed(steps["ingest"])
		tTelemetry := time.Now()
		local := goDone(func() {
			if g.ns != nil {
				g.ns.Shutdown()
				g.ns.WaitForShutdown()
			}
			if g.store != nil && !storeBusy {
				_ = g.store.Close()
			}
		})
		if left := waitSteps(time.Now().Add(localCloseGrace), map[string]<-chan struct{}{"local": local}); len(left) > 0 {
			g.log.Warn("local closing (embedded NATS server, ClickHouse engine) still running; exiting", "waited", localCloseGrace)
		}
		ms := func(a, b time.Time) time.Duration { return b.Sub(a).Round(time.Millisecond) }
		end := time.Now()
		g.log.Info("stopped", "took", ms(plan.start, end), "drain", ms(plan.start, t0),
			"steps", ms(t0, tSteps), "connections", ms(tSteps, tConns), "telemetry", ms(tConns, tTelemetry), "local", ms(tTelemetry, end))
	})
}

// goDone runs f in a goroutine and returns a channel closed when it returns.
func goDone(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitSteps waits for the steps until by and returns the names of those
// still running then, sorted.
func waitSteps(by time.Time, steps map[string]<-chan struct{}) []string {
	t := time.NewTimer(time.Until(by))
	defer t.Stop()
	for _, done := range steps {
		select {
		case <-done:
			continue
		case <-t.C:
		}
		break
	}
	var left []string
	for name, done := range steps {
		if !closed(done) {
			left = append(left, name)
		}
	}
	slices.Sort(left)
	return left
}

// drainBy drains the connections (their pending publishes flushed, their
// subscriptions' messages handled) and closes those still draining at by.
func drainBy(by time.Time, ncs ...*nats.Conn) {
	for _, nc := range ncs {
		_ = nc.Drain()
	}
	for _, nc := range ncs {
		for !nc.IsClosed() && time.Now().Before(by) {
			time.Sleep(10 * time.Millisecond)
		}
		nc.Close()
	}
}
