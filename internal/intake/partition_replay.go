package intake

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A new owner replays the entries logged after its checkpoint and issues
// their writes again, under the same message ids. The events stream drops
// a write whose id it still remembers, but only within its duplicate
// window, and a server rebuilds that memory at start counting back from
// the time it starts: a gateway restarted minutes after a crash would
// store the replayed writes twice. So a takeover reads, from the events
// stream itself, which writes were stored since the checkpoint, and the
// replay resolves those as the duplicates they are without publishing
// them. The duplicate window then only covers a deposed owner's writes
// still in flight when its successor read the stream.
//
// A checkpoint records a lower bound of the events stream's sequence at
// its snapshot (head.eventsSeq): the highest acknowledgement this replica
// had seen. Every write issued after the snapshot is stored after that
// acknowledgement, so after that sequence.

// storedWrites is which writes the events stream holds after a sequence:
// a 128-bit hash of each message id, with the message's sequence. A
// collision (two ids with one hash among the writes of one replay) is
// below 2^-100 for any replay this side of billions of writes; its cost
// would be one write not stored.
type storedWrites struct {
	seqs map[[2]uint64]uint64
	// until is the intake sequence after which the partition's entries
	// were logged after the scan began, when no earlier write can be
	// theirs: the index is dropped once the replay passes it.
	until uint64
}

// writeSeeds hash message ids for storedWrites; per process, since the
// index never leaves it.
var writeSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func writeKey(id string) [2]uint64 {
	return [2]uint64{maphash.String(writeSeeds[0], id), maphash.String(writeSeeds[1], id)}
}

// lookup returns the sequence of the stored write with message id id.
func (s *storedWrites) lookup(id string) (uint64, bool) {
	if s == nil || id == "" {
		return 0, false
	}
	seq, ok := s.seqs[writeKey(id)]
	return seq, ok
}

// scanStoredWrites reads the message ids of the events stream's messages
// after sequence after (headers only), up to its last message when the
// scan starts. until is the intake stream's last sequence, read first.
func (in *Intake) scanStoredWrites(ctx context.Context, after uint64) (*storedWrites, error) {
	ii, err := in.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("intake stream info: %w", err)
	}
	ei, err := in.events.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("events stream info: %w", err)
	}
	s := &storedWrites{until: ii.State.LastSeq}
	last := ei.State.LastSeq
	in.noteEventsSeq(last)
	if last <= after || ei.State.Msgs == 0 {
		return s, nil
	}
	s.seqs = make(map[[2]uint64]uint64, min(last-after, 1<<16))
	c, err := in.events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   after + 1,
		HeadersOnly:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("read the events stream: %w", err)
	}
	start, progress := time.Now(), time.Now()
	for ctx.Err() == nil {
		batch, err := c.Fetch(4096, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("read the events stream: %w", err)
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read the events stream: %w", err)
			}
			progress = time.Now()
			if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
				s.seqs[writeKey(id)] = meta.Sequence.Stream
			}
			// Up to last, not until nothing is pending: the consumer
			// reads the replica it was placed on, which may lag the
			// stream and hold less.
			if meta.Sequence.Stream >= last {
				in.log.Debug("stored writes read", "after", after, "last", last, "ids", len(s.seqs), "took", time.Since(start))
				return s, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("read the events stream: %w", err)
		}
		if time.Since(progress) > storedWritesStall {
			return nil, fmt.Errorf("read the events stream: no message for %s, short of sequence %d", storedWritesStall, last)
		}
	}
	return nil, ctx.Err()
}

// storedWritesStall bounds how long scanStoredWrites waits for a replica
// that lags the events stream before the takeover tries again.
const storedWritesStall = 10 * time.Second

// noteEventsSeq raises the highest events-stream sequence known stored.
func (in *Intake) noteEventsSeq(seq uint64) {
	for {
		cur := in.eventsSeq.Load()
		if seq <= cur || in.eventsSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// storedAck is the acknowledgement of a write found stored: a future that
// is already resolved.
type storedAck struct{ ok chan *jetstream.PubAck }

func newStoredAck(stream string, seq uint64) *storedAck {
	a := &storedAck{ok: make(chan *jetstream.PubAck, 1)}
	a.ok <- &jetstream.PubAck{Stream: stream, Sequence: seq, Duplicate: true}
	return a
}

func (a *storedAck) Ok() <-chan *jetstream.PubAck { return a.ok }
func (a *storedAck) Err() <-chan error            { return nil }
func (a *storedAck) Msg() *nats.Msg               { return nil }

// eventsLast is the events stream's last sequence.
func (in *Intake) eventsLast(ctx context.Context) (uint64, error) {
	ei, err := in.events.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("events stream info: %w", err)
	}
	in.noteEventsSeq(ei.State.LastSeq)
	return ei.State.LastSeq, nil
}
