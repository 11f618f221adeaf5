package rules

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// Config configures the evaluation of rules.
type Config struct {
	// Shards split the rules; each is evaluated by one replica at a time.
	Shards int `yaml:"shards"`
	// LeaseTTL: a shard whose owner stops renewing its lease (it died) is
	// taken over after this long.
	LeaseTTL time.Duration `yaml:"leaseTTL"`
	// Checkpoint is how often an owner checkpoints a shard's state.
	Checkpoint time.Duration `yaml:"checkpoint"`
	// Tick is how often time-driven conditions (absence, a count's window
	// sliding past, renotify) are evaluated.
	Tick time.Duration `yaml:"tick"`
	// Duplicates is the notifications stream's duplicate window: a
	// takeover replays at most this far back without notifying twice.
	Duplicates time.Duration `yaml:"duplicates"`
	// Retention is how long notifications (for redelivery) are kept.
	Retention time.Duration `yaml:"retention"`
	// Replicas of the rules' streams and buckets.
	Replicas int `yaml:"replicas"`
	// EventsStream is the stream the rules evaluate.
	EventsStream string `yaml:"eventsStream"`
	// ReplicaID names this replica in leases.
	ReplicaID string `yaml:"replicaID"`
	// Buckets: the rules, the shards' checkpoints, the shards' leases.
	RulesBucket string `yaml:"rulesBucket"`
	StateBucket string `yaml:"stateBucket"`
	LeaseBucket string `yaml:"leaseBucket"`
}

// DefaultConfig is the configuration of a gateway.
func DefaultConfig() Config {
	return Config{
		Shards:       4,
		LeaseTTL:     10 * time.Second,
		Checkpoint:   time.Second,
		Tick:         time.Second,
		Duplicates:   time.Hour,
		Retention:    7 * 24 * time.Hour,
		Replicas:     1,
		EventsStream: "EVENTS",
		RulesBucket:  "eventgate_rules",
		StateBucket:  "eventgate_rules_state",
		LeaseBucket:  "eventgate_rules_leases",
	}
}

// Validate checks a configuration.
func (c Config) Validate() error {
	switch {
	case c.Shards < 1 || c.Shards > 1024:
		return fmt.Errorf("rules: shards must be between 1 and 1024, got %d", c.Shards)
	case c.LeaseTTL < time.Second:
		return fmt.Errorf("rules: lease TTL must be at least 1s, got %s", c.LeaseTTL)
	case c.Checkpoint <= 0 || c.Tick <= 0:
		return errors.New("rules: checkpoint and tick intervals must be positive")
	case c.Duplicates < c.LeaseTTL+c.Checkpoint:
		return fmt.Errorf("rules: the duplicate window (%s) must exceed the lease TTL plus the checkpoint interval", c.Duplicates)
	case c.ReplicaID == "":
		return errors.New("rules: a replica id is required")
	}
	return nil
}

// Engine evaluates the rules of the shards this replica owns.
type Engine struct {
	cfg    Config
	js     jetstream.JetStream
	store  *Store
	feed   Feed
	log    *slog.Logger
	events jetstream.Stream
	notify jetstream.Stream
	states jetstream.KeyValue
	leases jetstream.KeyValue

	mu      sync.Mutex
	owned   map[int]bool
	changed chan struct{}
	// evaluating: the rules the owned shards have taken in: uid → shard.
	evaluating map[string]int
	members    int          // replicas announced (balance.go)
	taking     int          // shards being taken, not owned yet
	releasing  map[int]bool // owned shards being handed over

	// queued: the rules of the owned shards this replica queued a
	// notification for (package notify serves their delivery queues, and
	// leaves alone the rules that never notified); a rule leaves it with
	// its shard. queuedCh is closed and replaced when one is added.
	queued   map[string]bool
	queuedCh chan struct{}

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NoteQueued records that a notification was queued for the rule with
// uid (by a shard, or a redelivery): its delivery queue is to be served.
func (e *Engine) NoteQueued(uid string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.queued[uid] {
		return
	}
	e.queued[uid] = true
	close(e.queuedCh)
	e.queuedCh = make(chan struct{})
}

// Queued returns the rules NoteQueued recorded that this replica still
// evaluates (or has not yet taken in), and a channel closed at the next
// one.
func (e *Engine) Queued() ([]string, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.queued))
	for uid := range e.queued {
		out = append(out, uid)
	}
	return out, e.queuedCh
}

// Start ensures the notifications stream and the buckets, and starts
// competing for the shards.
func Start(ctx context.Context, js jetstream.JetStream, feed Feed, store *Store, cfg Config, log *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, js: js, feed: feed, store: store, log: log.With("component", "rules"), owned: map[int]bool{}, changed: make(chan struct{}), evaluating: map[string]int{}, members: 1, releasing: map[int]bool{},
		queued: map[string]bool{}, queuedCh: make(chan struct{})}
	var err error
	if e.events, err = js.Stream(ctx, cfg.EventsStream); err != nil {
		return nil, fmt.Errorf("rules: events stream %s: %w", cfg.EventsStream, err)
	}
	if e.notify, err = ejs.CreateOrUpdateStream(ctx, js, jetstream.StreamConfig{
		Name:        NotifyStream,
		Description: "notifications of eventgate rules, one subject per rule; each rule's delivery consumes its subject",
		Subjects:    []string{NotifySubjects},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.Retention,
		Duplicates:  cfg.Duplicates,
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
	}, e.log); err != nil {
		return nil, fmt.Errorf("rules: notifications stream: %w", err)
	}
	if e.states, err = ejs.CreateOrUpdateKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: cfg.StateBucket, Description: "eventgate rules: each shard's evaluation checkpoint", History: 1, Replicas: max(cfg.Replicas, 1),
	}, e.log); err != nil {
		return nil, fmt.Errorf("rules: state bucket: %w", err)
	}
	if e.leases, err = ejs.CreateOrUpdateKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket: cfg.LeaseBucket, Description: "eventgate rules: which replica evaluates each shard", History: 1,
		TTL: cfg.LeaseTTL, Replicas: max(cfg.Replicas, 1),
	}, e.log); err != nil {
		return nil, fmt.Errorf("rules: lease bucket: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.announce(rctx)
	}()
	for i := 0; i < cfg.Shards; i++ {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.compete(rctx, i)
		}()
	}
	return e, nil
}

// Stop hands the owned shards over: each is checkpointed and its lease
// released, so that another replica continues at once where this one
// stands.
func (e *Engine) Stop() {
	e.cancel()
	e.wg.Wait()
}

// ShardOf is the shard of tenant t's rules: every rule of a tenant is in
// the same shard, so that one shard only reads the tenant's events (its
// feed filters by tenant), and each shard's filter names about 1/Shards of
// the tenants with rules.
func (e *Engine) ShardOf(t Tenant) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(t.Type))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(t.Name))
	return int(h.Sum32() % uint32(e.cfg.Shards))
}

// Owns reports whether this replica owns the shard of tenant t's rules,
// and returns a channel closed at the next change of ownership.
func (e *Engine) Owns(t Tenant) (bool, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.owned[e.ShardOf(t)], e.changed
}

// Evaluates reports whether this replica evaluates the rule with uid: it
// owns its shard and the shard has taken the rule in.
func (e *Engine) Evaluates(uid string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.evaluating[uid]
	return ok
}

// Evaluating is how many rules this replica evaluates.
func (e *Engine) Evaluating() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.evaluating)
}

func (e *Engine) setEvaluating(shard int, uids map[string]*compiled) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for uid, n := range e.evaluating {
		if n == shard && uids[uid] == nil {
			delete(e.evaluating, uid)
			delete(e.queued, uid) // deleted, or its shard handed over
		}
	}
	for uid := range uids {
		e.evaluating[uid] = shard
	}
}

// OwnedShards is how many shards this replica owns.
func (e *Engine) OwnedShards() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.owned)
}

func (e *Engine) setOwned(shard int, owned bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if owned {
		e.owned[shard] = true
	} else {
		delete(e.owned, shard)
		delete(e.releasing, shard)
	}
	close(e.changed)
	e.changed = make(chan struct{})
}

// Stream is the notifications stream.
func (e *Engine) Stream() jetstream.Stream { return e.notify }

func leaseKey(shard int) string { return fmt.Sprintf("shard.%d", shard) }

// compete takes the shard's lease whenever it is free, and evaluates the
// shard while it holds it.
func (e *Engine) compete(ctx context.Context, shard int) {
	log := e.log.With("shard", shard)
	poll := max(e.cfg.LeaseTTL/4, 100*time.Millisecond)
	for ctx.Err() == nil {
		if !e.mayTake() {
			sleep(ctx, poll)
			continue
		}
		e.mu.Lock()
		e.taking++
		e.mu.Unlock()
		rev, err := e.leases.Create(ctx, leaseKey(shard), []byte(e.cfg.ReplicaID))
		e.mu.Lock()
		e.taking--
		e.mu.Unlock()
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				log.Debug("rules: lease", "err", err)
			}
			sleep(ctx, poll)
			continue
		}
		log.Info("rules: shard lease taken")
		if e.own(ctx, shard, rev, log) {
			sleep(ctx, e.cfg.LeaseTTL) // given up to balance: the others' turn
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// own evaluates the shard until ctx ends (a graceful handover), the shard
// is given up to balance the replicas (balanced is then true), or the
// lease is lost (another replica has it, or NATS is gone).
func (e *Engine) own(ctx context.Context, shard int, leaseRev uint64, log *slog.Logger) (balanced bool) {
	octx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	var leaseMu sync.Mutex
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		t := time.NewTicker(e.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-octx.Done():
				return
			case <-t.C:
			}
			leaseMu.Lock()
			rctx, cancel := context.WithTimeout(octx, e.cfg.LeaseTTL/3)
			rev, err := e.leases.Update(rctx, leaseKey(shard), []byte(e.cfg.ReplicaID), leaseRev)
			cancel()
			if err == nil {
				leaseRev = rev
			}
			leaseMu.Unlock()
			if err != nil && octx.Err() == nil {
				lost(fmt.Errorf("lease renewal: %w", err))
				return
			}
			if e.shouldRelease(shard) {
				lost(errHandover)
				return
			}
		}
	}()
	sh, err := e.restore(octx, shard, log)
	if err == nil {
		e.setOwned(shard, true)
		err = sh.run(octx)
		e.setEvaluating(shard, nil)
		e.setOwned(shard, false)
	}
	lost(err)
	<-renewDone
	balanced = errors.Is(context.Cause(octx), errHandover)
	if sh != nil && (balanced || ctx.Err() != nil && context.Cause(octx) == context.Canceled) {
		// A graceful stop: the last checkpoint, then the lease, so that
		// another replica takes over at once.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sh.checkpoint(sctx); err != nil {
			log.Warn("rules: final checkpoint", "err", err)
		}
		leaseMu.Lock()
		_ = e.leases.Delete(sctx, leaseKey(shard), jetstream.LastRevision(leaseRev))
		leaseMu.Unlock()
		log.Info("rules: shard handed over", "balance", balanced)
		return balanced
	}
	if err != nil && ctx.Err() == nil {
		log.Warn("rules: shard lost", "err", err)
		// Still ours if only the evaluation failed: give it up now rather
		// than at its expiry (a revision another owner wrote is not ours).
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		leaseMu.Lock()
		_ = e.leases.Delete(dctx, leaseKey(shard), jetstream.LastRevision(leaseRev))
		leaseMu.Unlock()
		cancel()
		sleep(ctx, e.cfg.LeaseTTL/4)
	}
	return false
}
