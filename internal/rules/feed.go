package rules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/subject"
)

// A shard reads only the events of its rules' tenants: its consumer
// filters the stream by their subjects (events.<type>.<name>.>), so the
// server delivers each event to the one shard, if any, that has a rule of
// its tenant, and a shard without rules reads nothing. When the tenants
// change, the feed is recreated from the event after the last one handled:
// the rules already in the shard miss nothing and see nothing twice, and
// a rule just taken in skips what was stored before it.

// MaxFeedSubjects bounds a shard's filter: past it, the shard reads the
// whole stream and skips the other tenants' events by their subject,
// before decoding them. A consumer of many filter subjects costs the
// server a walk of each block's subject tree against all of them for every
// message it looks up: with 1,000 rules of 1,000 tenants over 4 shards
// (250 subjects each) that took 22% of the gateway's CPU at 5,000 events/s
// (`bench -scale small -only rules -profile`, LoadNextMsgMulti), and the
// emit→watch p99 went to seconds; reading everything and skipping by
// subject costs a delivery per event and shard.
const MaxFeedSubjects = 16

// refeedDelay gathers the changes of a burst (an apply of many rules) into
// one new feed.
const refeedDelay = 100 * time.Millisecond

// feed is a shard's ordered consumer and the goroutine reading it.
type feed struct {
	subjects []string
	cons     jetstream.Consumer
	it       jetstream.MessagesContext
	msgs     chan jetstream.Msg
	done     chan error // the reader's end, when not stopped
	stop     context.CancelFunc
	ended    chan struct{}
}

func (f *feed) subjectsOrNil() []string {
	if f == nil {
		return nil
	}
	return f.subjects
}

// subjects is the filter the shard's rules need, sorted; nil: none.
func (sh *shard) subjects() []string {
	if len(sh.byTen) == 0 {
		return nil
	}
	if len(sh.byTen) > MaxFeedSubjects {
		return []string{ejs.SubjectsAll}
	}
	out := make([]string, 0, len(sh.byTen))
	for t := range sh.byTen {
		out = append(out, subject.Filter{TenantType: &t.Type, TenantName: &t.Name}.Subject())
	}
	slices.Sort(out)
	return out
}

// follow makes the feed read the tenants of the shard's rules, from the
// event after the last handled. A new feed replaces the old one, and what the old one delivered
// unhandled is dropped: the new one delivers it again if it is still of
// interest.
func (sh *shard) follow(ctx context.Context) error {
	sh.refeed = nil
	subjects := sh.subjects()
	if sh.feed != nil && slices.Equal(subjects, sh.feed.subjects) {
		return nil
	}
	sh.stopFeed()
	if len(subjects) == 0 {
		sh.caughtUp = true // nothing to read: time alone drives the shard
		return nil
	}
	from := sh.state.Seq + 1
	cons, err := sh.e.events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return fmt.Errorf("events consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("events consumer: %w", err)
	}
	// The consumer is created: its pending count is of the filter.
	if info := cons.CachedInfo(); info != nil {
		sh.caughtUp = info.NumPending == 0
	} else {
		sh.caughtUp = false
	}
	fctx, stop := context.WithCancel(ctx)
	f := &feed{subjects: subjects, cons: cons, it: it, msgs: make(chan jetstream.Msg, 256), done: make(chan error, 1), stop: stop, ended: make(chan struct{})}
	go func() {
		defer close(f.ended)
		for {
			m, err := it.Next()
			if err != nil {
				f.done <- err
				return
			}
			select {
			case f.msgs <- m:
			case <-fctx.Done():
				return
			}
		}
	}()
	sh.feed = f
	sh.log.Debug("rules: shard feed", "tenants", len(sh.byTen), "from", from)
	return nil
}

// stopFeed ends the feed and deletes its consumer.
func (sh *shard) stopFeed() {
	f := sh.feed
	if f == nil {
		return
	}
	sh.feed = nil
	f.stop()
	f.it.Stop()
	<-f.ended
	if info := f.cons.CachedInfo(); info != nil {
		// Not the shard's context: it may be ending.
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := sh.e.events.DeleteConsumer(dctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			sh.log.Debug("rules: delete feed consumer", "err", err)
		}
	}
}

// advance moves the shard's position past the events its filter skips:
// when the feed has delivered every event of its tenants stored so far and
// the shard has handled them all (or it reads nothing), it stands at the
// stream's last event. Otherwise a shard whose tenants are quiet, or
// without rules, would stay where it last handled an event, and its next
// feed (a rule of another tenant taken in, a successor) would start there,
// the server walking everything stored since.
//
// A feed that delivered since the last tick is left alone: its position
// moves by itself, and the consumer's pending count, over many filters,
// is not free for the server to compute.
func (sh *shard) advance(ctx context.Context) {
	handled := sh.handled
	sh.handled = false
	if sh.refeed != nil {
		return // the new feed starts where the shard stands
	}
	if sh.feed != nil && handled {
		return
	}
	actx, cancel := context.WithTimeout(ctx, sh.e.cfg.Tick)
	defer cancel()
	info, err := sh.e.events.Info(actx)
	if err != nil || info.State.LastSeq <= sh.state.Seq {
		return // tried again at the next tick
	}
	if f := sh.feed; f != nil {
		if len(f.msgs) > 0 {
			return
		}
		// Asked after the stream: its pending count covers every event
		// stored up to the stream's last seen above.
		ci, err := f.cons.Info(actx)
		if err != nil || ci.NumPending > 0 || ci.Delivered.Stream > sh.state.Seq {
			return
		}
	}
	sh.state.Seq, sh.dirty = info.State.LastSeq, true
}
