package intake

import (
	"context"
	"fmt"
	"time"

	"github.com/eventgate/eventgate/internal/series"
)

// takeover makes this replica the partition's owner under pin: restore the
// latest checkpoint, claim it (a compare-and-set that fences off any
// previous owner's later checkpoints), and rewind the consumer to the entry
// after it. Only then are entries handled again.
func (pt *partition) takeover(ctx context.Context, pin, cause string) {
	pt.drop()
	var bad struct{ rev, times uint64 } // a damaged checkpoint, read again
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			backoff(ctx, time.Duration(min(attempt, 10))*50*time.Millisecond)
		}
		if attempt == 20 {
			pt.log.Error("partition takeover keeps failing; leaving it to another replica")
			return
		}
		snap, h, rev, err := pt.in.store.load(ctx, pt.p)
		headLost := err != nil && rev != 0 && damaged(err)
		if err != nil && !headLost {
			pt.log.Warn("takeover: read checkpoint", "err", err)
			continue
		}
		var agg *series.Aggregator
		if headLost {
			// err stands: salvaged below once it holds.
		} else if snap == nil {
			// Nothing of the partition was written before: its writes
			// come after the events stream's last message.
			var last uint64
			if last, err = pt.in.eventsLast(ctx); err != nil {
				pt.log.Warn("takeover: read the events stream", "err", err)
				continue
			}
			agg, err = series.New(pt.in.cfg.Series)
			if err == nil {
				snap, err = agg.Snapshot()
			}
			h = head{inline: snap, eventsSeq: last, hasEventsSeq: true}
			h.size, h.crc = uint64(len(snap)), crcOf(snap)
		} else {
			agg, err = series.RestoreCheckpoint(pt.in.cfg.Series, snap, func(id uint64) ([]byte, error) {
				return pt.in.store.segment(ctx, pt.p, h, id)
			})
		}
		if err != nil && rev != 0 && damaged(err) {
			if bad.rev != rev {
				bad.rev, bad.times = rev, 0
			}
			if bad.times++; bad.times >= salvageAfter {
				agg, h, err = pt.salvage(ctx, snap, h, headLost, err)
			}
		}
		if err != nil {
			pt.log.Error("takeover: restore checkpoint", "err", err)
			continue
		}
		agg.SetReader(pt.reader(ctx))
		h.owner = pin
		newRev, err := pt.in.store.putHead(ctx, pt.p, h, rev)
		if err != nil {
			pt.log.Debug("takeover: claim checkpoint", "err", err)
			continue
		}
		var stored *storedWrites
		if h.hasEventsSeq {
			if stored, err = pt.in.scanStoredWrites(ctx, h.eventsSeq); err != nil {
				pt.log.Warn("takeover: read the writes stored since the checkpoint", "err", err)
				continue
			}
		}
		if _, err := pt.in.stream.ResetConsumerToSequence(ctx, consumerName(pt.p), h.logSeq+1); err != nil {
			pt.log.Warn("takeover: rewind consumer", "err", err)
			continue
		}

		pt.pin, pt.agg, pt.rev, pt.head, pt.seq = pin, agg, newRev, h, h.logSeq
		pt.stored = stored
		pt.ckptPos, pt.ckptAt, pt.sinceCkpt = agg.Position(), time.Now(), 0
		pt.pipe = newPipeline(pt.in.nc, pt.in.deliverLocal, pt.in.m.stage.WithLabelValues("write"), pt.in.noteEventsSeq)
		pt.lastStats = series.Stats{}
		pt.chainOK, pt.tickInFlight = false, false
		pt.owned.Store(true)
		pt.ownedSince = time.Now()
		pt.in.members.owned.Add(1)
		pt.in.m.owned.Inc()
		pt.in.m.takeovers.Inc()
		pt.in.addStats(func(s *Stats) { s.Takeovers++ })
		pt.updateGauges()
		if err := pt.in.store.purgeUnnamed(ctx, pt.p, h, newRev); err != nil {
			pt.log.Warn("purge old checkpoint chunks", "err", err)
		}
		pt.log.Info("partition taken over", "cause", cause, "entry", h.logSeq, "keys", agg.Stats().Keys)
		return
	}
}

// salvageAfter is how many times in a row a takeover reads a checkpoint
// damaged under the same head revision before it salvages it. Every read
// of the checkpoint goes to the bucket's leader, and the chunks a head
// names are purged only once a later head replaced it: a chunk missing
// under the same head three times is gone for good.
const salvageAfter = 3

// salvage restores what a damaged checkpoint still holds (cause says what
// is damaged): without the segments that cannot be read (their singletons
// are forgotten), or, when the head snapshot itself cannot, an empty
// aggregator at the head's position. The partition then goes on from the
// head's log entry as after any takeover, and nothing it accepted is lost;
// but a key whose series or singleton was forgotten starts again, as a new
// event. It returns the head to claim: one with the new empty snapshot
// inline when the head snapshot was lost.
func (pt *partition) salvage(ctx context.Context, snap []byte, h head, headLost bool, cause error) (*series.Aggregator, head, error) {
	lost := 0
	var agg *series.Aggregator
	var err error
	if !headLost {
		agg, err = series.RestoreCheckpoint(pt.in.cfg.Series, snap, func(id uint64) ([]byte, error) {
			b, err := pt.in.store.segment(ctx, pt.p, h, id)
			if err != nil && damaged(err) {
				lost++
				return nil, series.ErrSegmentLost
			}
			return b, err
		})
		if err != nil && !damaged(err) {
			return nil, h, err
		}
		headLost = err != nil
	}
	if headLost {
		if agg, err = series.NewAt(pt.in.cfg.Series, h.position); err == nil {
			snap, err = agg.Snapshot()
		}
		if err != nil {
			return nil, h, err
		}
		h = head{position: h.position, logSeq: h.logSeq, eventsSeq: h.eventsSeq, hasEventsSeq: h.hasEventsSeq, owner: h.owner, inline: snap}
		h.size, h.crc = uint64(len(snap)), crcOf(snap)
	}
	pt.in.m.salvaged.Inc()
	pt.in.addStats(func(s *Stats) { s.Salvaged++ })
	pt.log.Error("partition checkpoint damaged: taken over with what it still holds; keys it no longer tracks start again as new events",
		"cause", cause, "head_lost", headLost, "segments_lost", lost, "entry", h.logSeq, "keys", agg.Stats().Keys)
	return agg, h, nil
}

// drop forgets the partition's state (it is owned elsewhere now, or will be
// restored). Writes already handed to the pipeline still complete.
func (pt *partition) drop() {
	if pt.agg == nil {
		return
	}
	pt.pipe.close()
	// A checkpoint still being written ends by itself: stored, or fenced
	// off by the compare-and-set when someone claimed the head meanwhile.
	pt.pipe, pt.agg, pt.pin, pt.ckpt = nil, nil, "", nil
	pt.readSeq, pt.readRaws = 0, nil
	pt.stored = nil
	pt.owned.Store(false)
	pt.in.members.owned.Add(-1)
	pt.in.m.owned.Dec()
	pt.in.m.active.Sub(float64(pt.nseries.Swap(0)))
	pt.in.m.tracked.Sub(float64(pt.nkeys.Swap(0)))
	pt.in.m.bytes.Sub(float64(pt.nbytes.Swap(0)))
}

// release ends the run: after Stop, a graceful handover; after a crash of
// the connection, nothing.
func (pt *partition) release() {
	if pt.agg == nil {
		return
	}
	pipe := pt.pipe
	defer func() { <-pipe.done }()
	sc := pt.in.stopCtx.Load()
	if sc == nil || pt.in.nc.IsClosed() {
		pt.drop()
		return
	}
	if err := pt.handover(*sc); err != nil {
		pt.in.stopFailed(fmt.Errorf("partition %d: %w", pt.p, err))
	}
}

// handover gives the partition up gracefully: a checkpoint, then the pin
// is released and a tick put in the log, so that another replica takes
// over at once and continues exactly where this one stands.
func (pt *partition) handover(ctx context.Context) error {
	defer pt.drop()
	if err := pt.checkpoint(ctx); err != nil {
		return fmt.Errorf("handover checkpoint: %w", err)
	}
	if err := pt.in.stream.UnpinConsumer(ctx, consumerName(pt.p), ownerGroup); err != nil {
		pt.log.Warn("handover: unpin", "err", err)
	}
	if f := pt.publishTick(); f != nil {
		// Stored before Stop returns and the caller closes the connection.
		select {
		case <-f.Ok():
		case <-f.Err():
		case <-ctx.Done():
		}
	}
	pt.log.Info("partition handed over", "entry", pt.seq)
	return nil
}

// rebalance hands the partition over when this replica owns more than its
// share: one partition at a time across the replica, each owned for a
// while first.
func (pt *partition) rebalance(ctx context.Context) {
	m := pt.in.members
	every := pt.in.cfg.PinnedTTL / 2
	if int(m.owned.Load()) <= m.fairShare(pt.in.cfg.Partitions) || time.Since(pt.ownedSince) < every || !m.mayRelease(every) {
		return
	}
	if err := pt.handover(ctx); err != nil {
		pt.log.Warn("rebalance", "err", err)
	}
}

// fetchWait is how long an owner's pull may wait: short enough to keep its
// pin and to put a tick in the log soon after a write falls due.
func (pt *partition) fetchWait() time.Duration {
	w := pt.in.waitMax
	if due, ok := pt.agg.NextDue(); ok {
		w = min(w, max(time.Until(due)+5*time.Millisecond, 50*time.Millisecond))
	}
	return w
}
