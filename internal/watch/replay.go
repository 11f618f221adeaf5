package watch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server/gsl"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// maxReplayFilters bounds the filter subjects of a replay's consumer. A
// consumer of many filters costs the server a walk of each block's subject
// tree against all of them for every message it looks up (the rules'
// shards, of hundreds of tenants each, took a fifth of a gateway's CPU that
// way); reading everything and skipping by subject costs a delivery per
// event.
const maxReplayFilters = 16

// replay sends what o selects in (from, to] from JetStream and returns the
// last sequence covered. It reads through a consumer of its own, which it
// deletes when it returns however it ends (one made for a request that was
// cancelled meanwhile included). If the server drops that consumer while
// send is blocked (a watcher that stopped reading for longer than the
// consumer's inactivity limit), it goes on from the cursor with a new one.
func (h *Hub) replay(ctx context.Context, o event.WatchOptions, from, to uint64, send func(event.WatchItem) error) (uint64, error) {
	var cons jetstream.Consumer
	defer func() {
		if cons != nil {
			h.deleteConsumer(ctx, cons.CachedInfo().Name)
		}
	}()
	// Past maxReplayFilters subjects, the consumer reads every event and
	// the replay skips the others by subject: the server would walk each
	// block's subject tree against all the filters for every message.
	var only *gsl.GenericSublist[struct{}]
	if len(o.Subjects) > maxReplayFilters {
		only = gsl.NewSublist[struct{}]()
		for _, s := range o.Subjects {
			if err := only.Insert(s, struct{}{}); err != nil {
				return from, fmt.Errorf("watch subject %q: %w", s, err)
			}
		}
	}
	var pending uint64
	var lagging time.Time // since when the consumer's replica lags the stream
	cursor, again := from, false
	for cursor < to {
		if cons == nil {
			// Watch checked that the stream holds what follows from; a
			// consumer made again must find it still held.
			c, err := h.replayConsumer(ctx, o, cursor, again)
			if err != nil {
				return cursor, err
			}
			cons, pending, again = c, c.CachedInfo().NumPending, true
		}
		select {
		case <-h.done:
			return cursor, event.ErrWatchStopped
		default:
		}
		if pending == 0 {
			// The consumer reads the replica of the stream it was placed
			// on, and counts what that replica holds: one that lags the
			// stream (restarted, catching up) holds less. The replay is
			// over only when the stream's leader holds nothing selected
			// in (cursor, to] either.
			covered, err := h.replayCovered(ctx, o, cursor, to)
			if err != nil {
				return cursor, err
			}
			if covered {
				break
			}
			if lagging.IsZero() {
				lagging = time.Now()
				h.metrics.replayLagging.Inc()
			} else if time.Since(lagging) > replayLagLimit {
				// Another consumer may be placed on a replica that is
				// caught up.
				h.deleteConsumer(ctx, cons.CachedInfo().Name)
				cons, lagging = nil, time.Time{}
				continue
			}
			select {
			case <-ctx.Done():
				return cursor, ctx.Err()
			case <-h.done:
				return cursor, event.ErrWatchStopped
			case <-time.After(replayLagPoll): // the replica catching up
			}
			info, err := cons.Info(ctx)
			switch {
			case err == nil:
				pending = info.NumPending
			case consumerGone(err):
				h.deleteConsumer(ctx, cons.CachedInfo().Name)
				cons = nil
			default:
				return cursor, fmt.Errorf("watch replay: %w", err)
			}
			continue
		}
		lagging = time.Time{}
		var err error
		cursor, pending, err = h.replayBatch(ctx, cons, o, only, cursor, pending, to, send)
		switch {
		case err == nil, errors.Is(err, nats.ErrTimeout):
		case consumerGone(err):
			// Dropped while the watcher did not read: go on from the cursor.
			h.deleteConsumer(ctx, cons.CachedInfo().Name)
			cons = nil
		default:
			return cursor, err
		}
	}
	// Everything in (from, to] that the subjects select was sent or did not match.
	return to, nil
}

// How long a replay waits between looks at a consumer whose replica lags
// the stream, and how long before it makes another.
const (
	replayLagPoll  = 50 * time.Millisecond
	replayLagLimit = 5 * time.Second
)

// replayCovered reports whether the stream's leader holds no message that
// o selects in (cursor, to]: one request per filter subject of the replay
// consumer.
func (h *Hub) replayCovered(ctx context.Context, o event.WatchOptions, cursor, to uint64) (bool, error) {
	name := h.stream.CachedInfo().Config.Name
	for _, f := range replayFilters(o) {
		m, err := ejs.LeaderGet(ctx, h.js, name, ejs.MsgQuery{Seq: cursor + 1, NextBySubject: f})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("watch replay: %w", err)
		}
		if m.Sequence <= to {
			return false, nil
		}
	}
	return true, nil
}

// replayFilters are the filter subjects of a replay consumer for o: past
// maxReplayFilters subjects, every event.
func replayFilters(o event.WatchOptions) []string {
	if len(o.Subjects) > maxReplayFilters {
		return []string{ejs.SubjectsAll}
	}
	return o.Subjects
}

// replayBatch fetches and sends one batch of a replay, from cursor with
// pending messages left, and returns the new cursor and pending count. An
// error of send is returned as it is; one of the consumer is wrapped.
func (h *Hub) replayBatch(ctx context.Context, cons jetstream.Consumer, o event.WatchOptions, only *gsl.GenericSublist[struct{}], cursor, pending, to uint64, send func(event.WatchItem) error) (uint64, uint64, error) {
	batch, err := cons.Fetch(int(min(pending, 512)), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		return cursor, pending, fmt.Errorf("watch replay: %w", err)
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		meta, err := msg.Metadata()
		if err != nil {
			continue
		}
		seq := meta.Sequence.Stream
		pending = meta.NumPending
		if seq > to {
			// The replica holds a message past to, so all up to it: the
			// replay has covered to.
			cursor, pending = to, 0
			continue
		}
		if (only != nil && !only.HasInterest(msg.Subject())) || (o.MatchSubject != nil && !o.MatchSubject(msg.Subject())) {
			cursor = seq
			continue
		}
		cursor = seq
		if o.MatchEncoded != nil && !o.MatchEncoded(msg.Data()) {
			continue
		}
		ev, err := event.Unmarshal(msg.Data())
		if err != nil {
			h.metrics.decodeErrors.Inc()
			continue
		}
		if o.Match != nil && !o.Match(ev) {
			continue
		}
		ev.ResourceVersion = strconv.FormatUint(seq, 10)
		if err := send(event.WatchItem{Seq: seq, Event: ev, Raw: msg.Data(), Stored: meta.Timestamp}); err != nil {
			return cursor, pending, err
		}
	}
	if err := batch.Error(); err != nil {
		return cursor, pending, fmt.Errorf("watch replay: %w", err)
	}
	if got == 0 {
		info, err := cons.Info(ctx)
		if err != nil {
			return cursor, pending, fmt.Errorf("watch replay: %w", err)
		}
		pending = info.NumPending
	}
	return cursor, pending, nil
}

// replayConsumer makes a consumer of what o selects after sequence after;
// with check, it fails with event.ErrTooOld when the stream no longer holds all
// of them.
func (h *Hub) replayConsumer(ctx context.Context, o event.WatchOptions, after uint64, check bool) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		// Named here, so that it can be deleted even if the request that
		// made it is cancelled before the answer.
		Name:              h.replayName(),
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       after + 1,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: h.replayIdle,
		MemoryStorage:     true,
		Replicas:          1,
	}
	if fs := replayFilters(o); len(fs) == 1 {
		cfg.FilterSubject = fs[0]
	} else {
		cfg.FilterSubjects = fs
	}
	// Made whether or not the watch is cancelled meanwhile, then deleted
	// by the caller: a delete sent while the create is still under way
	// could be served first and leave the consumer behind.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	cons, err := h.stream.CreateConsumer(cctx, cfg)
	cancel()
	if err != nil {
		h.deleteConsumer(ctx, cfg.Name)
		return nil, fmt.Errorf("watch replay: %w", err)
	}
	if !check {
		return cons, nil
	}
	info, err := h.stream.Info(ctx)
	if err != nil {
		h.deleteConsumer(ctx, cfg.Name)
		return nil, fmt.Errorf("watch replay: stream info: %w", err)
	}
	if after+1 < info.State.FirstSeq {
		h.deleteConsumer(ctx, cfg.Name)
		return nil, fmt.Errorf("%w: %d; the oldest kept is %d", event.ErrTooOld, after, info.State.FirstSeq)
	}
	return cons, nil
}

// deleteConsumer deletes a replay consumer, whatever became of ctx.
func (h *Hub) deleteConsumer(ctx context.Context, name string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.stream.DeleteConsumer(dctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		h.log.Debug("watch replay: delete consumer", "consumer", name, "err", err)
	}
}

// consumerGone reports whether err says the replay consumer no longer
// exists (the server deleted it as inactive).
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders)
}

// replayName is a new replay consumer's name, after the replica's id when
// it has one.
func (h *Hub) replayName() string {
	if h.replica == "" {
		return "watch_" + nuid.Next()
	}
	return "watch_" + h.replica + "_" + nuid.Next()
}
