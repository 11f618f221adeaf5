package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/rules/rule"
)

// Store keeps rules in a JetStream KV bucket, one key per rule, and a
// cache of every rule that follows the bucket (a KV watch), so that a
// change made on any replica reaches every evaluator within moments.
type Store struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu      sync.RWMutex
	rules   map[string]*Rule // by key
	changed chan struct{}    // closed and replaced on every change
	ready   chan struct{}    // closed once the initial values are in
	watcher jetstream.KeyWatcher
	done    chan struct{}
}

// OpenStore ensures the bucket and starts following it.
func OpenStore(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, log *slog.Logger) (*Store, error) {
	kv, err := ejs.CreateOrUpdateKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "eventgate rules, one key per tenant's rule",
		History:     1,
		Replicas:    max(replicas, 1),
	}, log)
	if err != nil {
		return nil, fmt.Errorf("rules bucket %s: %w", bucket, err)
	}
	s := &Store{kv: kv, log: log, rules: map[string]*Rule{}, changed: make(chan struct{}), ready: make(chan struct{}), done: make(chan struct{})}
	// Not ctx: the watch lives as long as the store.
	s.watcher, err = kv.WatchAll(context.Background())
	if err != nil {
		return nil, fmt.Errorf("watch rules bucket: %w", err)
	}
	go s.follow()
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("rules bucket: initial load: %w", ctx.Err())
	}
	return s, nil
}

// Close stops following the bucket.
func (s *Store) Close() {
	if s.watcher != nil {
		_ = s.watcher.Stop()
	}
	<-s.done
}

func (s *Store) follow() {
	defer close(s.done)
	for e := range s.watcher.Updates() {
		if e == nil {
			close(s.ready)
			continue
		}
		s.mu.Lock()
		if e.Operation() != jetstream.KeyValuePut {
			delete(s.rules, e.Key())
		} else if r, err := decode(e); err != nil {
			s.log.Error("rules: undecodable rule", "key", e.Key(), "err", err)
		} else {
			s.rules[e.Key()] = r
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

func decode(e jetstream.KeyValueEntry) (*Rule, error) {
	var r Rule
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, err
	}
	r.Revision, r.Written = e.Revision(), e.Created()
	return &r, nil
}

// Snapshot returns every rule and a channel closed at the next change.
func (s *Store) Snapshot() ([]*Rule, <-chan struct{}) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Rule, 0, len(s.rules))
	for _, r := range s.rules {
		out = append(out, r)
	}
	return out, s.changed
}

// Create stores a new rule.
func (s *Store) Create(ctx context.Context, r *Rule) (*Rule, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	rev, err := s.kv.Create(ctx, r.Key(), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("%w: %s", ErrExists, r.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("store rule: %w", err)
	}
	out := *r
	out.Revision = rev
	return &out, nil
}

// Get reads a rule from the bucket (not the cache: a caller reads its
// own writes).
func (s *Store) Get(ctx context.Context, t Tenant, name string) (*Rule, error) {
	e, err := s.kv.Get(ctx, rule.Key(t, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("read rule: %w", err)
	}
	return decode(e)
}

// Update replaces a rule at revision rev.
func (s *Store) Update(ctx context.Context, r *Rule, rev uint64) (*Rule, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	nrev, err := s.kv.Update(ctx, r.Key(), b, rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("%w: %s", ErrConflict, r.Name)
		}
		return nil, fmt.Errorf("update rule: %w", err)
	}
	out := *r
	out.Revision = nrev
	return &out, nil
}

// Delete deletes a rule.
func (s *Store) Delete(ctx context.Context, t Tenant, name string) error {
	if _, err := s.Get(ctx, t, name); err != nil {
		return err
	}
	if err := s.kv.Delete(ctx, rule.Key(t, name)); err != nil {
		return fmt.Errorf("delete rule: %w", err)
	}
	return nil
}

// List returns a tenant's rules by name.
func (s *Store) List(ctx context.Context, t Tenant) ([]*Rule, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, rule.TenantPrefix(t))
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	var out []*Rule
	for k := range lister.Keys() {
		_, name, _ := strings.Cut(strings.TrimPrefix(k, t.Type+"."), ".")
		r, err := s.Get(ctx, t, name)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Rule) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Pause marks a rule paused with a reason, unless it changed meanwhile.
func (s *Store) Pause(ctx context.Context, t Tenant, name, uid, reason string) error {
	r, err := s.Get(ctx, t, name)
	if err != nil {
		return err
	}
	if r.UID != uid || r.Paused {
		return nil
	}
	r.Paused, r.PausedReason = true, reason
	_, err = s.Update(ctx, r, r.Revision)
	return err
}
