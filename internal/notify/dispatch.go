// Package notify delivers the notifications of rules (package rules queues
// them): each rule's queue is a durable consumer of the notifications
// stream (its state in the server's memory, made again from the delivery
// log when a server restarts), made with the rule's first notification
// and served by the replica that owns the rule's shard, one worker per
// rule so that a slow or dead destination delays nothing but itself.
// Delivery is at least once, under the notification's id; a failed attempt
// is retried with exponential backoff until the retry period ends (a dead
// letter), every attempt is recorded in the deliveries stream (the
// delivery log), and a destination failing for too long pauses its rule.
//
// dispatch.go runs the workers; destinations.go sends to webhooks (signed
// by package client/signature), Slack, CloudEvents sinks and NATS; log.go
// keeps and reads the delivery log.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventgate/eventgate/internal/rules"
)

// Config configures delivery.
type Config struct {
	// Backoff is the delay before the first retry; each retry doubles it,
	// up to MaxBackoff.
	Backoff    time.Duration `yaml:"backoff"`
	MaxBackoff time.Duration `yaml:"maxBackoff"`
	// RetryFor: a notification still undelivered this long after it was
	// queued is a dead letter.
	RetryFor time.Duration `yaml:"retryFor"`
	// PauseAfter: a destination failing for this long pauses its rule.
	PauseAfter time.Duration `yaml:"pauseAfter"`
	// Timeout bounds one attempt.
	Timeout time.Duration `yaml:"timeout"`
	// DenyPrivate refuses HTTP destinations on loopback, private and
	// link-local addresses (a tenant's URL reaching the gateway's own
	// network).
	DenyPrivate bool `yaml:"denyPrivateNetworks"`
	// IdleWait is how long an idle worker's pull request waits on the
	// server before it is renewed; the server sends it a heartbeat every
	// IdleWait/2 (at most every 30s), whose absence tells a lost request.
	// A stopped worker withdraws its request at once, whatever the wait.
	IdleWait time.Duration `yaml:"idleWait"`
	// Retention of the delivery log.
	Retention time.Duration `yaml:"retention"`
	Replicas  int           `yaml:"replicas"`
}

// DefaultConfig is the configuration of a gateway: retries over 6 hours.
func DefaultConfig() Config {
	return Config{
		Backoff:    5 * time.Second,
		MaxBackoff: 30 * time.Minute,
		RetryFor:   6 * time.Hour,
		PauseAfter: time.Hour,
		Timeout:    10 * time.Second,
		IdleWait:   2 * time.Minute,
		Retention:  7 * 24 * time.Hour,
		Replicas:   1,
	}
}

// Validate checks a configuration.
func (c Config) Validate() error {
	switch {
	case c.Backoff <= 0 || c.MaxBackoff < c.Backoff:
		return fmt.Errorf("notify: backoff (%s) must be positive and at most the max backoff (%s)", c.Backoff, c.MaxBackoff)
	case c.RetryFor <= 0 || c.PauseAfter <= 0:
		return errors.New("notify: the retry period and the pause delay must be positive")
	case c.Timeout <= 0:
		return errors.New("notify: the attempt timeout must be positive")
	case c.IdleWait < time.Second:
		return fmt.Errorf("notify: the idle wait must be at least 1s, got %s", c.IdleWait)
	}
	return nil
}

// PauseFunc is told when a rule is paused because its destination kept
// failing (the gateway emits an event about it).
type PauseFunc func(ctx context.Context, r *rules.Rule, reason string)

// Dispatcher runs a delivery worker for each rule whose shard this replica
// owns.
type Dispatcher struct {
	cfg     Config
	js      jetstream.JetStream
	engine  *rules.Engine
	store   *rules.Store
	log     *slog.Logger
	notify  jetstream.Stream
	logS    jetstream.Stream // the delivery log
	onPause PauseFunc
	sender  *sender

	// serving: the rules whose delivery queue this replica serves, as of
	// the end of the last reconcile (a queue deleted with its rule is
	// gone by then).
	serving atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Serving is the number of rules whose delivery queue this replica serves
// (a worker each).
func (d *Dispatcher) Serving() int { return int(d.serving.Load()) }

// Start starts delivering. nc publishes to NATS destinations.
func Start(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, engine *rules.Engine, store *rules.Store, cfg Config, onPause PauseFunc, log *slog.Logger) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := newSender(cfg.Timeout, cfg.DenyPrivate, nc)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{cfg: cfg, js: js, engine: engine, store: store, log: log.With("component", "notify"),
		notify: engine.Stream(), onPause: onPause, sender: s}
	if d.logS, err = ensureLog(ctx, js, cfg.Retention, cfg.Replicas, d.log); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.reconcile(rctx)
	}()
	return d, nil
}

// Stop stops every worker; what they did not acknowledge is delivered
// again by the next owner.
func (d *Dispatcher) Stop() {
	d.cancel()
	d.wg.Wait()
}

// consumerPrefix + a rule's uid names its delivery queue's consumer.
const consumerPrefix = "rule-"

func consumerName(ruleUID string) string { return consumerPrefix + ruleUID }

// activeRescan is how often the dispatcher looks again for the rules with
// a delivery queue (scanActive), besides at its start and at every change
// of the shards it owns: a safety net, as the engine tells it of every
// notification it queues.
const activeRescan = time.Minute

// reconcile keeps one worker per owned, unpaused rule that has a delivery
// queue: a rule notified at least once. Most rules are quiet most of the
// time, and one that never notified needs no durable consumer on the
// server (with its state, ~40 KB of the server's memory, and an idle
// pull request each): its worker starts with its first notification,
// which the engine tells of (Queued), or which a scan of the stream
// finds if the replica that queued it stopped first.
func (d *Dispatcher) reconcile(ctx context.Context) {
	type running struct {
		w      *worker
		cancel context.CancelFunc
		done   chan struct{}
	}
	run := map[string]*running{}
	// A stopped worker withdraws its pull request and gives back what it
	// holds at once, but finishes an attempt it started; it is not waited
	// for, but at the end.
	var ending sync.WaitGroup
	stop := func(uid string) {
		r := run[uid]
		r.cancel()
		ending.Go(func() { <-r.done })
		delete(run, uid)
	}
	defer func() {
		for uid := range run {
			stop(uid)
		}
		d.serving.Store(0)
		ending.Wait()
	}()
	active := map[string]bool{} // rules with a delivery queue, by uid
	var rescan <-chan time.Time // nil: scan now
	for {
		if rescan == nil {
			wait := activeRescan
			if err := d.scanActive(ctx, active); err != nil {
				if ctx.Err() != nil {
					return
				}
				d.log.Warn("notify: find the rules with notifications", "err", err)
				wait = time.Second
			}
			rescan = time.After(wait)
		}
		queued, queuedChanged := d.engine.Queued()
		for _, uid := range queued {
			active[uid] = true
		}
		// After Queued: the store had a rule before a shard evaluated it.
		all, storeChanged := d.store.Snapshot()
		_, ownChanged := d.engine.Owns(rules.Tenant{})
		want := map[string]*rules.Rule{}
		exists := make(map[string]bool, len(all))
		for _, r := range all {
			exists[r.UID] = true
			if owned, _ := d.engine.Owns(r.Tenant); owned && active[r.UID] {
				want[r.UID] = r
			}
		}
		for uid := range active {
			if !exists[uid] {
				delete(active, uid) // deleted: what a scan finds of it again is dropped again
			}
		}
		for uid, r := range run {
			if rule := want[uid]; rule == nil || rule.Paused {
				stop(uid)
				if rule == nil && !exists[uid] {
					// Deleted: its queue goes with it.
					dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_ = d.notify.DeleteConsumer(dctx, consumerName(uid))
					cancel()
				}
				continue
			}
			r.w.setRule(want[uid])
		}
		for uid, rule := range want {
			if run[uid] != nil || rule.Paused {
				continue
			}
			d.log.Debug("notify: worker starts", "rule", rule.ID())
			wctx, cancel := context.WithCancel(ctx)
			w := &worker{d: d, rule: rule, log: d.log.With("rule", rule.ID())}
			r := &running{w: w, cancel: cancel, done: make(chan struct{})}
			run[uid] = r
			go func() {
				defer close(r.done)
				w.run(wctx)
			}()
		}
		d.serving.Store(int64(len(run)))
		select {
		case <-ctx.Done():
			return
		case <-storeChanged:
		case <-queuedChanged:
		case <-ownChanged:
			rescan = nil // shards taken over: their rules' queues
		case <-rescan:
			rescan = nil
		}
	}
}

// scanActive adds to active the rules that have a delivery queue on the
// server: a consumer (created by an earlier worker, on any replica) or
// notifications stored (queued by a replica that stopped before its
// worker created the consumer).
func (d *Dispatcher) scanActive(ctx context.Context, active map[string]bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	names := d.notify.ConsumerNames(ctx)
	for name := range names.Name() {
		if uid, ok := strings.CutPrefix(name, consumerPrefix); ok {
			active[uid] = true
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("list delivery consumers: %w", err)
	}
	info, err := d.notify.Info(ctx, jetstream.WithSubjectFilter(rules.NotifySubjects))
	if err != nil {
		return fmt.Errorf("notifications by rule: %w", err)
	}
	for subj := range info.State.Subjects {
		if uid, ok := strings.CutPrefix(subj, rules.NotifySubject("")); ok {
			active[uid] = true
		}
	}
	return nil
}

// worker delivers one rule's queue, one notification at a time.
type worker struct {
	d   *Dispatcher
	log *slog.Logger

	mu           sync.Mutex
	rule         *rules.Rule
	failingSince time.Time

	// Of the current consumer, in the worker's goroutine: notifications
	// settled before it was made again (resume), and its acknowledgement
	// floor as last read, which the delivery log's records carry.
	cons    jetstream.Consumer
	settled map[uint64]bool
	floor   uint64
	floorAt time.Time
}

func (w *worker) setRule(r *rules.Rule) {
	w.mu.Lock()
	w.rule = r
	w.mu.Unlock()
}

func (w *worker) current() *rules.Rule {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rule
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		cons, err := w.consumer(ctx)
		w.cons = cons
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("notify: delivery consumer", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		if err := w.consume(ctx, cons); err != nil && ctx.Err() == nil {
			w.log.Debug("notify: pull", "err", err)
			sleep(ctx, 250*time.Millisecond)
		}
	}
}

// consumer takes the rule's queue up where it was, or makes it.
//
// The queue's consumer keeps its state (what was delivered, acknowledged,
// is to be retried when) in the server's memory: a consumer on disk has
// the server rewrite a state file (open, write, close, rename) after
// every delivery and every acknowledgement, which cost a rule more than
// evaluating it. The consumer lives as long as the server (on a cluster,
// as long as a majority of its replicas); a server that restarts has
// lost it, and the delivery log, written before each acknowledgement,
// tells where the queue was: see resume.
func (w *worker) consumer(ctx context.Context) (jetstream.Consumer, error) {
	rule := w.current()
	name := consumerName(rule.UID)
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "delivery of rule " + rule.ID(),
		FilterSubject: rules.NotifySubject(rule.UID),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.d.cfg.Timeout + ackMargin,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
		MemoryStorage: true,
	}
	cons, err := w.d.notify.Consumer(ctx, name)
	switch {
	case err == nil:
		old := cons.CachedInfo().Config
		if old.AckWait == cfg.AckWait && old.MaxAckPending == cfg.MaxAckPending && old.Description == cfg.Description {
			return cons, nil
		}
		// What the server cannot change stays: a queue made on disk by an
		// earlier version stays there.
		cfg.MemoryStorage, cfg.DeliverPolicy, cfg.OptStartSeq = old.MemoryStorage, old.DeliverPolicy, old.OptStartSeq
		if cons, err = w.d.notify.UpdateConsumer(ctx, cfg); err != nil {
			return nil, fmt.Errorf("update consumer %s: %w", name, err)
		}
		return cons, nil
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("consumer %s: %w", name, err)
	}
	start, settled, err := w.resume(ctx, rule.UID)
	if err != nil {
		return nil, fmt.Errorf("resume the queue of rule %s: %w", rule.ID(), err)
	}
	if start > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	// Created by another worker meanwhile (a replica taking the rule over
	// as this one lets it go): the error has run() look again.
	if cons, err = w.d.notify.CreateConsumer(ctx, cfg); err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", name, err)
	}
	if len(settled) > 0 {
		w.log.Info("notify: delivery queue made again from the delivery log", "from", start, "settled", len(settled))
	}
	w.settled, w.floor, w.floorAt = settled, max(start, 1)-1, time.Time{}
	return cons, nil
}

// clockSlack is how far the clocks of a cluster's servers may be apart:
// the time a notification was queued, stamped by one server, against that
// of an attempt logged by another.
const clockSlack = time.Minute

// resume finds where a rule's queue was, for a consumer made again after
// the server lost it: the first notification to deliver (0: all of them),
// and the ones after it that were delivered or given up on already.
//
// Every attempt's record carries the queue's acknowledgement floor as the
// worker last read it: every notification of the rule up to it was
// settled. The records of the notifications after it were all written
// after the first of them was queued, so resume reads the log from then.
// A notification whose attempt was not recorded (the gateway stopped
// between the attempt and its record, or the record failed) is delivered
// again, under its id; so is one whose record the log no longer holds
// (maxLogPerRule).
func (w *worker) resume(ctx context.Context, ruleUID string) (uint64, map[uint64]bool, error) {
	last, err := w.d.logS.GetLastMsgForSubject(ctx, logSubject(ruleUID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil, nil // nothing attempted yet
	}
	if err != nil {
		return 0, nil, fmt.Errorf("last delivery record: %w", err)
	}
	var lr Record
	if err := json.Unmarshal(last.Data, &lr); err != nil {
		return 0, nil, fmt.Errorf("last delivery record: %w", err)
	}
	start := lr.Floor + 1
	first, err := w.d.notify.GetMsg(ctx, start, jetstream.WithGetMsgSubject(rules.NotifySubject(ruleUID)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return start, nil, nil // nothing queued after the floor
	}
	if err != nil {
		return 0, nil, fmt.Errorf("first notification after the floor: %w", err)
	}
	since := first.Time.Add(-clockSlack)
	if last.Time.Before(since) {
		return start, nil, nil // none of them attempted
	}
	settled := map[uint64]bool{}
	err = readSubject(ctx, w.d.logS, logSubject(ruleUID), since, func(m jetstream.Msg) error {
		var r Record
		if json.Unmarshal(m.Data(), &r) != nil || r.Seq < start {
			return nil
		}
		if r.Status == StatusDelivered || r.Status == StatusDead {
			settled[r.Seq] = true
		} else {
			delete(settled, r.Seq) // its latest record tells
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("read delivery log: %w", err)
	}
	return start, settled, nil
}

// consume delivers what the queue holds and waits for more. One pull
// request stands on the server, renewed when it expires (IdleWait) or
// half its batch has come: an idle rule costs a heartbeat every
// heartbeat() and a request every IdleWait (a lost request shows by the
// heartbeats missing, and is renewed). It returns when ctx ends or the
// pull cannot go on (the connection closed, the consumer deleted).
func (w *worker) consume(ctx context.Context, cons jetstream.Consumer) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(pullBatch), jetstream.PullExpiry(w.d.cfg.IdleWait),
		jetstream.PullHeartbeat(w.d.cfg.heartbeat()))
	if err != nil {
		return fmt.Errorf("pull from %s: %w", consumerName(w.current().UID), err)
	}
	defer it.Stop()
	// A stopping worker drains, without waiting for its request to
	// expire: the request is withdrawn (the client unsubscribes and
	// flushes; the server sends nothing to a request nobody listens to)
	// and what had arrived is given back at once, not left to the ack
	// wait. On a cluster, a notification the consumer's leader sent
	// before it learnt of the unsubscription still waits out the ack wait
	// (it is not lost: the next owner gets it then).
	defer context.AfterFunc(ctx, it.Drain)()
	for {
		m, err := it.Next()
		switch {
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			if ctx.Err() != nil {
				return nil
			}
			return err
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			// Next pulls again.
			w.log.Debug("notify: pull request lost", "err", err)
			continue
		case err != nil:
			return err
		case ctx.Err() != nil:
			_ = m.Nak()
			continue
		}
		w.deliver(ctx, m)
	}
}

// pullBatch is how many notifications a worker holds at most.
const pullBatch = 16

// ackMargin is how much longer than an attempt's timeout the server waits
// for a notification's acknowledgement before it sends it again.
const ackMargin = 10 * time.Second

// heartbeat is how often the server tells an idle worker that its pull
// request still stands: half the idle wait, at most 30s (the client's
// limits are 500ms to 30s).
func (c Config) heartbeat() time.Duration {
	return min(c.IdleWait/2, 30*time.Second)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// backoff is the delay after the attempt-th failed attempt.
func (c Config) backoff(attempt uint64) time.Duration {
	d := c.Backoff
	for i := uint64(1); i < attempt && d < c.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.MaxBackoff)
}

func (w *worker) deliver(ctx context.Context, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		_ = m.Term()
		return
	}
	if w.settled[meta.Sequence.Stream] {
		// Delivered (or given up on) before the server lost the queue.
		delete(w.settled, meta.Sequence.Stream)
		_ = m.Ack()
		return
	}
	var n rules.Notification
	if err := json.Unmarshal(m.Data(), &n); err != nil {
		w.log.Error("notify: undecodable notification", "seq", meta.Sequence.Stream, "err", err)
		_ = m.Term()
		return
	}
	rule := w.current()
	w.log.Debug("notify: deliver", "id", n.ID, "attempt", meta.NumDelivered)
	// The server sends the notification again if it is not acknowledged
	// within the ack wait (Timeout + ackMargin) of its delivery. One
	// stored less than ackMargin/2 ago was delivered less than that ago:
	// the attempt, within Timeout, ends in time. Only an older one (a
	// retry, a backlog, one held behind slow attempts) has the wait
	// started again, which costs a message to the server and an update of
	// the consumer's state (replicated, on a cluster). This reads the
	// server's timestamp with this host's clock, as the retry period does.
	if time.Since(meta.Timestamp) >= ackMargin/2 {
		_ = m.InProgress()
	}
	// Not ctx: a worker stopping (its rule handed over, the gateway
	// shutting down) finishes the attempt it started, within the timeout,
	// and settles it; cut short, it would leave the notification to the
	// ack wait, and to be sent twice if it had arrived.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.d.cfg.Timeout+5*time.Second)
	defer cancel()
	actx, acancel := context.WithTimeout(ctx, w.d.cfg.Timeout)
	start := time.Now()
	out := w.d.sender.send(actx, rule.Destination, &n, m.Data())
	acancel()
	rec := Record{NotificationID: n.ID, Seq: meta.Sequence.Stream, State: n.State, EventUID: n.EventUID(), Created: n.Time,
		Time: start.UTC(), Latency: time.Since(start), Code: out.code, Floor: w.ackFloor(ctx)}
	now := time.Now()
	switch {
	case out.err == nil:
		rec.Status = StatusDelivered
		w.failingSince = time.Time{}
	case now.Sub(meta.Timestamp) >= w.d.cfg.RetryFor:
		rec.Status, rec.Error = StatusDead, out.err.Error()
	default:
		rec.Status, rec.Error = StatusRetrying, out.err.Error()
	}
	if out.err != nil && w.failingSince.IsZero() {
		w.failingSince = now
	}
	// The record before the acknowledgement: a queue the server lost is
	// made again from the log (resume), which must know of every
	// notification settled.
	w.record(ctx, rule.UID, rec)
	switch rec.Status {
	case StatusDelivered:
		// Not DoubleAck: waiting for the server to confirm costs a
		// reply and a round trip, and guards against nothing delivery at
		// least once needs: an acknowledgement lost with the connection
		// has the notification sent again after the ack wait, under its
		// id, as one the attempt made but never acknowledged would be.
		_ = m.Ack()
	case StatusDead:
		_ = m.Term()
	default:
		_ = m.NakWithDelay(w.d.cfg.backoff(meta.NumDelivered))
	}
	if out.err != nil && now.Sub(w.failingSince) >= w.d.cfg.PauseAfter {
		reason := fmt.Sprintf("destination failing since %s: %s", w.failingSince.UTC().Format(time.RFC3339), rec.Error)
		// Not ctx: pausing the rule stops this worker, which may cancel
		// ctx before the pause is acknowledged or told.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.d.store.Pause(pctx, rule.Tenant, rule.Name, rule.UID, reason); err != nil {
			w.log.Warn("notify: pause rule", "err", err)
			return
		}
		w.log.Warn("notify: rule paused", "reason", reason)
		if w.d.onPause != nil {
			w.d.onPause(pctx, rule, reason)
		}
		w.failingSince = time.Time{}
	}
}

// ackFloor is the queue's acknowledgement floor as the server last told
// it, read at most once a second: every notification of the rule up to
// it is settled. Read before the attempt being recorded is acknowledged,
// it may lag, which has resume look at a few records more.
func (w *worker) ackFloor(ctx context.Context) uint64 {
	if w.cons == nil || time.Since(w.floorAt) < time.Second {
		return w.floor
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := w.cons.Info(ictx)
	if err != nil {
		w.log.Debug("notify: acknowledgement floor", "err", err)
		return w.floor
	}
	w.floor, w.floorAt = max(w.floor, info.AckFloor.Stream), time.Now()
	return w.floor
}

func (w *worker) record(ctx context.Context, ruleUID string, r Record) {
	b, _ := json.Marshal(r)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := w.d.js.Publish(pctx, logSubject(ruleUID), b); err != nil {
		w.log.Warn("notify: delivery log", "err", err)
	}
}
