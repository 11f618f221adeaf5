package rules

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"text/template"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/rules/rule"
)

// checkpoint is a shard's state at a position of the events stream.
type checkpointData struct {
	// Seq: every event up to it is evaluated.
	Seq   uint64                `json:"seq"`
	Owner string                `json:"owner"`
	Rules map[string]*ruleState `json:"rules"`
}

// compiled is a rule ready to evaluate.
type compiled struct {
	rule *Rule
	tmpl *template.Template
	cond string // the condition, encoded, to notice a change
}

// shard is one shard while this replica owns it. Its fields are the run
// goroutine's.
type shard struct {
	e     *Engine
	n     int
	log   *slog.Logger
	rev   uint64 // the checkpoint's KV revision: the fence against an old owner
	state checkpointData
	dirty bool
	rules map[string]*compiled // by rule uid
	byTen map[Tenant][]*compiled
	// caughtUp: the last event handled was the stream's last; only then
	// does wall time drive the conditions (a replay must decide in log
	// time, as the first run did).
	caughtUp bool
	logTime  time.Time
	// queued are the notifications published and not yet acknowledged:
	// evaluation does not wait for each, but a checkpoint waits for all,
	// so that one never covers an event whose notification may be lost.
	queued []jetstream.PubAckFuture
	// feed reads the events of the shard's tenants (nil: no rule, nothing
	// to read); refeed fires when the rules changed and the feed is to
	// follow them.
	feed   *feed
	refeed <-chan time.Time
	// fresh are the rules taken in (or whose condition changed) since the
	// feed last followed the rules, by uid: each evaluates the events
	// stored after its Since, some of which the shard may have read
	// before it knew the rule (follow rewinds for them).
	fresh map[string]bool
	// halted: the feed stopped (the replica is shutting down).
	halted bool
}

// maxQueued bounds the notifications in flight before evaluation waits.
const maxQueued = 1024

func stateKey(shard int) string { return fmt.Sprintf("shard.%d", shard) }

// restore loads the shard's checkpoint and claims it: the write fences
// off any previous owner's later checkpoints.
func (e *Engine) restore(ctx context.Context, n int, log *slog.Logger) (*shard, error) {
	sh := &shard{e: e, n: n, log: log, fresh: map[string]bool{}}
	// From the bucket's leader: a replica that lags would answer with a
	// checkpoint older than the last, whose claim then fails until it
	// catches up.
	v, rev, err := ejs.LeaderKVGet(ctx, e.js, e.cfg.StateBucket, stateKey(n))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		info, err := e.events.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("events stream info: %w", err)
		}
		sh.state = checkpointData{Seq: info.State.LastSeq, Rules: map[string]*ruleState{}}
	case err != nil:
		return nil, fmt.Errorf("read checkpoint: %w", err)
	default:
		if err := decodeCheckpoint(v, &sh.state); err != nil {
			return nil, fmt.Errorf("decode checkpoint: %w", err)
		}
		sh.rev = rev
	}
	if err := sh.checkpoint(ctx); err != nil {
		return nil, fmt.Errorf("claim checkpoint: %w", err)
	}
	log.Info("rules: shard restored", "seq", sh.state.Seq, "rules", len(sh.state.Rules))
	return sh, nil
}

// checkpoint writes the shard's state, unless another owner wrote since.
func (sh *shard) checkpoint(ctx context.Context) error {
	if err := sh.settle(ctx); err != nil {
		return err
	}
	sh.state.Owner = sh.e.cfg.ReplicaID
	b, err := encodeCheckpoint(&sh.state)
	if err != nil {
		return err
	}
	var rev uint64
	if sh.rev == 0 {
		rev, err = sh.e.states.Create(ctx, stateKey(sh.n), b)
	} else {
		rev, err = sh.e.states.Update(ctx, stateKey(sh.n), b, sh.rev)
	}
	if err != nil {
		return err
	}
	sh.rev, sh.dirty = rev, false
	return nil
}

// sync brings the shard's rules in line with the store. A rule new to the
// shard (or whose condition changed) evaluates the events stored after its
// condition was (the server's time of both writes): not older ones, even
// those the shard has yet to read when it takes the rule in. Every owner
// derives the same start from the store, checkpointed or not.
func (sh *shard) sync(all []*Rule) {
	rules := map[string]*compiled{}
	byTen := map[Tenant][]*compiled{}
	for _, r := range all {
		if sh.e.ShardOf(r.Tenant) != sh.n {
			continue
		}
		c := sh.rules[r.UID]
		if c == nil || c.rule.Revision != r.Revision {
			tmpl, err := rule.CompileTemplate(r.Template)
			if err != nil {
				sh.log.Warn("rules: template", "rule", r.ID(), "err", err)
			}
			cond, _ := json.Marshal(struct {
				C Condition
				F string
				R string
			}{r.Condition, r.FieldSelector + "|" + r.LabelSelector, r.ResolveFieldSelector})
			c = &compiled{rule: r, tmpl: tmpl, cond: string(cond)}
		}
		rules[r.UID] = c
		byTen[r.Tenant] = append(byTen[r.Tenant], c)
		st := sh.state.Rules[r.UID]
		if st == nil || st.Cond != c.cond {
			// A new rule, or a new condition: the old state means nothing.
			st = newRuleState(r.UID)
			st.Cond, st.Since = c.cond, r.Written
			sh.state.Rules[r.UID] = st
			sh.dirty = true
			sh.fresh[r.UID] = true
		}
	}
	for uid := range sh.state.Rules {
		if rules[uid] == nil {
			delete(sh.state.Rules, uid)
			delete(sh.fresh, uid)
			sh.dirty = true
		}
	}
	sh.rules, sh.byTen = rules, byTen
	sh.e.setEvaluating(sh.n, rules)
}

// run evaluates the shard from its checkpoint until ctx ends.
func (sh *shard) run(ctx context.Context) error {
	defer sh.stopFeed()
	all, changed := sh.e.store.Snapshot()
	sh.sync(all)
	if err := sh.follow(ctx); err != nil {
		return err
	}
	var resync <-chan time.Time // a take-in of the rules is due
	ticker := time.NewTicker(sh.e.cfg.Tick)
	defer ticker.Stop()
	ckpt := time.NewTicker(sh.e.cfg.Checkpoint)
	defer ckpt.Stop()
	for {
		var ready <-chan struct{}
		var readDone <-chan error
		if sh.feed != nil {
			readDone = sh.feed.done
			if sh.refeed == nil {
				// Paused while a new feed is due: handling on would move
				// the checkpoint past events of a tenant the new feed
				// adds, which it would then start after.
				ready = sh.feed.in.ready
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readDone:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := sh.refollow(ctx, err); err != nil {
				return err
			}
		case <-ready:
			in := &sh.feed.in
			items := in.take()
			for i, it := range items {
				if err := sh.handle(ctx, it, i == len(items)-1); err != nil {
					return err
				}
			}
			in.recycle(items)
		case <-changed:
			// Rules come in bursts (an apply of many): take them in at
			// most every syncDelay, not once per rule, since each take-in
			// goes over every rule.
			changed, resync = nil, time.After(syncDelay)
		case <-resync:
			resync = nil
			all, changed = sh.e.store.Snapshot()
			sh.sync(all)
			if sh.refeed == nil && (len(sh.fresh) > 0 || !slices.Equal(sh.subjects(), sh.feed.subjectsOrNil())) {
				// Rules come in bursts (an apply of many): the feed
				// follows them once the burst is in.
				sh.refeed = time.After(refeedDelay)
			}
		case <-sh.refeed:
			if err := sh.follow(ctx); err != nil {
				return err
			}
		case now := <-ticker.C:
			if sh.feed == nil && sh.refeed == nil && len(sh.fresh) == 0 && !sh.halted {
				sh.skipAhead()
			}
			if !sh.caughtUp {
				continue
			}
			t := now
			if t.Before(sh.logTime) {
				t = sh.logTime
			}
			for _, c := range sh.rules {
				st := sh.state.Rules[c.rule.UID]
				if len(st.Groups) == 0 {
					continue
				}
				if err := sh.publish(ctx, c, tick(c.rule, st, t)); err != nil {
					return err
				}
				sh.dirty = true
			}
		case <-ckpt.C:
			if !sh.dirty {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := sh.checkpoint(cctx)
			cancel()
			if err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
	}
}

// handle evaluates one event of the stream, or moves the shard's position
// to a bookmark's: every event of its tenants up to it was sent. last: the
// item ends what the shard took from its inbox.
func (sh *shard) handle(ctx context.Context, it event.WatchItem, last bool) error {
	if it.Live {
		// Caught up with the feed, which reads the stream as it is
		// written, when nothing the feed sent waits behind this.
		sh.caughtUp = last
	}
	if it.Seq <= sh.state.Seq {
		return nil
	}
	sh.state.Seq, sh.dirty = it.Seq, true
	if it.Bookmark {
		return nil
	}
	if it.Stored.After(sh.logTime) {
		sh.logTime = it.Stored
	}
	t := sh.logTime
	ev, rules := sh.decode(it)
	for _, c := range rules {
		r := c.rule
		st := sh.state.Rules[r.UID]
		if it.Stored.Before(st.Since) || it.Seq <= st.Seq {
			continue // stored before the rule (or its condition), or evaluated before a rewind
		}
		if !sees(r, ev) {
			continue
		}
		matched := Matches(&r.Filter, ev)
		resolves := r.Resolve != nil && Matches(r.Resolve, ev)
		if !matched && !resolves {
			continue
		}
		if err := sh.publish(ctx, c, evaluate(r, st, ev, t, matched, resolves)); err != nil {
			return err
		}
	}
	return nil
}

// decode returns the event of it and the rules of its tenant, or no event
// when none of them can match it: the feed sends a shard its tenants'
// events undecoded, and most are of a type no rule asks for (a rule on
// Warnings sees six Normal events to each Warning in the bench's
// workload), so the type and tenant are read from the encoding first.
func (sh *shard) decode(it event.WatchItem) (*eventgatev1.Event, []*compiled) {
	if ev := it.Event; ev != nil { // a replay decodes
		tn := ev.GetTenant()
		return ev, sh.byTen[Tenant{Type: tn.GetType(), Name: tn.GetName()}]
	}
	h, ok := event.PeekEncoded(it.Raw)
	if !ok {
		sh.log.Error("rules: undecodable event", "seq", it.Seq)
		return nil, nil
	}
	// The head's strings share the message's bytes: a lookup keeps none.
	rules := sh.byTen[Tenant{Type: h.TenantType, Name: h.TenantName}]
	if !slices.ContainsFunc(rules, func(c *compiled) bool { return c.mayMatch(h.Type, it.Raw) }) {
		return nil, nil
	}
	ev, err := event.Unmarshal(it.Raw)
	if err != nil {
		sh.log.Error("rules: undecodable event", "seq", it.Seq, "err", err)
		return nil, nil
	}
	ev.ResourceVersion = strconv.FormatUint(it.Seq, 10)
	return ev, rules
}

// mayMatch reports whether an event of type typ, encoded as raw, may pass
// the rule's filter or its resolve filter: false rules both out. It reads
// the type and the labels a filter requires (=, ==, in, exists) from the
// encoding and checks them as Matches does, so that an event none of its
// tenant's rules can match is not decoded (most rules of a tenant select
// a few of its events by a label).
func (c *compiled) mayMatch(typ string, raw []byte) bool {
	r := c.rule
	return mayPass(&r.Filter, typ, raw) || (r.Resolve != nil && mayPass(r.Resolve, typ, raw))
}

func mayPass(f *query.Filter, typ string, raw []byte) bool {
	if !set(f.Type, typ) {
		return false
	}
	for _, l := range f.Labels {
		switch l.Op {
		case "=", "==", "in", "exists":
		default:
			continue // met by an event without the label: decoded to tell
		}
		v, found, ok := event.PeekLabel(raw, l.Key)
		switch {
		case !ok:
			return true // decoded, to log what is wrong with it
		case !found:
			return false
		case (l.Op == "=" || l.Op == "==") && v != l.Values[0]:
			return false
		case l.Op == "in" && !slices.Contains(l.Values, v):
			return false
		}
	}
	return true
}

// publish queues the notifications, each under its id: the stream drops
// one it already has (a replay after a takeover). It does not wait for
// their acknowledgements (settle does): a round trip per notification
// held up the shard's evaluation behind the server's latency.
func (sh *shard) publish(ctx context.Context, c *compiled, fired []Fired) error {
	for _, fi := range fired {
		n := notification(c.rule, fi, c.tmpl)
		b, err := json.Marshal(n)
		if err != nil {
			return err
		}
		msg := nats.NewMsg(NotifySubject(c.rule.UID))
		msg.Data = b
		msg.Header.Set(HeaderNotificationID, n.ID)
		if len(sh.queued) >= maxQueued {
			if err := sh.settle(ctx); err != nil {
				return err
			}
		}
		f, err := sh.e.js.PublishMsgAsync(msg, jetstream.WithMsgID(c.rule.UID+"/"+n.ID))
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			// The connection's window is full: wait for ours, then again.
			if err = sh.settle(ctx); err == nil {
				f, err = sh.e.js.PublishMsgAsync(msg, jetstream.WithMsgID(c.rule.UID+"/"+n.ID))
			}
		}
		if err != nil {
			return fmt.Errorf("queue notification: %w", err)
		}
		sh.queued = append(sh.queued, f)
		sh.e.NoteQueued(c.rule.UID)
	}
	return nil
}

// Checkpoints are gzipped JSON: the groups' last events repeat most of
// their fields, and a KV value must fit in a NATS message (1 MB by
// default).
// gzipWriters keeps the checkpoints' compressors: each shard writes one a
// second, and a new compressor is ~650 KB of tables.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

func encodeCheckpoint(c *checkpointData) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	if err := json.NewEncoder(zw).Encode(c); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decodeCheckpoint(b []byte, c *checkpointData) error {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer zr.Close()
	if err := json.NewDecoder(zr).Decode(c); err != nil {
		return err
	}
	// Empty maps are left out of the encoding.
	if c.Rules == nil {
		c.Rules = map[string]*ruleState{}
	}
	for _, st := range c.Rules {
		if st.Groups == nil {
			st.Groups = map[string]*groupState{}
		}
		if st.Series == nil {
			st.Series = map[string]time.Time{}
		}
	}
	return nil
}

// settle waits until every queued notification is stored. A failure ends
// the shard's run: its next owner replays from the last checkpoint, and
// the stream drops what was stored already.
func (sh *shard) settle(ctx context.Context) error {
	for i, f := range sh.queued {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			sh.queued = sh.queued[i+1:]
			return fmt.Errorf("queue notification: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	sh.queued = sh.queued[:0]
	return nil
}
