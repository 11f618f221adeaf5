package intake

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A checkpoint persists the aggregator, as the series protocol says: once
// every write issued before it is acknowledged, its snapshot goes to the
// partition's head, compare-and-set on the revision this owner last wrote.
// (The consumer acknowledges nothing: a takeover rewinds it to the head's
// position.) Only the snapshot is taken on the owner's goroutine; the wait
// for the writes and the stores run beside it (a ckptJob), so that the
// partition's occurrences are not held up while its checkpoint is written:
// at a high rate of distinct events a checkpoint carries megabytes of
// singletons, and writing them took tens of milliseconds, during which
// every occurrence of the partition waited. One checkpoint is written at a
// time; the next one starts from the head it wrote.
type ckptJob struct {
	done  chan struct{} // closed when the job ended
	start time.Time
	// Set before done is closed: the new head and its revision, or why
	// the checkpoint was not stored.
	head head
	rev  uint64
	err  error
}

// ckptTimeout bounds the writing of one checkpoint. A checkpoint that does
// not complete in time failed: the owner restores the previous one.
const ckptTimeout = 30 * time.Second

// startCheckpoint snapshots the aggregator and starts writing the
// checkpoint, unless the position has not moved since the last one or a
// checkpoint is still being written (a later call starts it then). It
// returns the error of a checkpoint that failed since the last call: the
// owner must then restore its previous checkpoint (resync), since the
// aggregator counts what a checkpoint carried as persisted.
func (pt *partition) startCheckpoint(ctx context.Context) error {
	if err := pt.reapCheckpoint(ctx, false); err != nil || pt.ckpt != nil {
		return err
	}
	pos := pt.agg.Position()
	if pos == pt.ckptPos {
		pt.ckptAt = time.Now()
		return nil
	}
	// Incremental: the singletons created since the previous checkpoint,
	// the series, and which earlier segments still count.
	issued := pt.pipe.issued
	// Every write after the snapshot is stored after what is known stored
	// now; the previous head's bound holds too.
	eventsSeq := max(pt.in.eventsSeq.Load(), pt.head.eventsSeq)
	cp, err := pt.agg.Checkpoint()
	if err != nil {
		return err
	}
	job := &ckptJob{done: make(chan struct{}), start: time.Now()}
	pt.ckpt = job
	pt.ckptPos, pt.ckptAt, pt.sinceCkpt = pos, time.Now(), 0
	prev, rev, seq, pin, pipe := pt.head, pt.rev, pt.seq, pt.pin, pt.pipe
	// Not the run's context: a checkpoint under way when the replica stops
	// completes, and the handover's checkpoint follows it.
	jctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ckptTimeout)
	go func() {
		defer close(job.done)
		defer cancel()
		if err := pipe.waitAcked(jctx, issued); err != nil {
			job.err = fmt.Errorf("writes not acknowledged: %w", err)
			return
		}
		if f := pt.in.beforeSave.Load(); f != nil {
			(*f)(pt.p)
		}
		h, r, err := pt.in.store.save(jctx, pt.p, cp, prev, pos, seq, eventsSeq, pin, rev)
		if err != nil {
			job.err = err
			return
		}
		job.head, job.rev = h, r
		if err := pt.in.store.purgeGens(jctx, pt.p, garbage(prev, h)); err != nil {
			pt.log.Warn("purge old checkpoint chunks", "err", err)
		}
		pt.in.m.checkpoint.Observe(time.Since(job.start).Seconds())
		pt.in.addStats(func(s *Stats) { s.Checkpoints++ })
	}()
	return nil
}

// reapCheckpoint takes in the checkpoint being written, if any, once it has
// ended: at once, or (wait) when it ends. It returns the checkpoint's error
// (see startCheckpoint), or ctx's when ctx ends first.
func (pt *partition) reapCheckpoint(ctx context.Context, wait bool) error {
	job := pt.ckpt
	if job == nil {
		return nil
	}
	if wait {
		select {
		case <-job.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	} else {
		select {
		case <-job.done:
		default:
			return nil
		}
	}
	pt.ckpt = nil
	if job.err != nil {
		return job.err
	}
	pt.head, pt.rev = job.head, job.rev
	return nil
}

// checkpoint writes a checkpoint of where the partition stands now and
// waits for it (and for the one being written, if any).
func (pt *partition) checkpoint(ctx context.Context) error {
	if err := pt.reapCheckpoint(ctx, true); err != nil {
		return err
	}
	if err := pt.startCheckpoint(ctx); err != nil {
		return err
	}
	return pt.reapCheckpoint(ctx, true)
}

// resync recovers from cause while owning: a gap is mended by rewinding the
// consumer to the entry after the aggregator's position; anything else (a
// write or checkpoint that failed, a lost compare-and-set, a new pin) by a
// takeover from the latest checkpoint — if the server still pins this
// replica.
func (pt *partition) resync(ctx context.Context, cause error) {
	if ctx.Err() != nil || pt.in.nc.IsClosed() {
		return
	}
	label := "checkpoint"
	switch {
	case errors.Is(cause, errGap):
		label = "gap"
	case errors.Is(cause, errPinChanged):
		label = "pin"
	case errors.Is(cause, ErrFenced):
		label = "fenced"
	case errors.Is(cause, errRead):
		label = "read"
	}
	pt.in.m.resyncs.WithLabelValues(label).Inc()
	pt.in.addStats(func(s *Stats) { s.Resyncs++ })
	if pc := (*pinChange)(nil); errors.As(cause, &pc) {
		pt.log.Info("partition pinned anew: restoring", "cause", cause)
		pt.takeover(ctx, pc.pin, label)
		return
	}
	ok, err := pt.pinned(ctx)
	if err != nil || !ok {
		pt.log.Info("partition lost", "cause", cause, "err", err)
		pt.drop()
		return
	}
	if errors.Is(cause, errGap) {
		pt.log.Warn("gap in the partition's deliveries: rewinding", "cause", cause)
		if _, err := pt.in.stream.ResetConsumerToSequence(ctx, consumerName(pt.p), pt.seq+1); err != nil {
			pt.log.Warn("rewind consumer", "err", err)
			pt.takeover(ctx, pt.pin, label)
			return
		}
		pt.chainOK = false
		return
	}
	pt.log.Warn("partition resync from its checkpoint", "cause", cause)
	pt.takeover(ctx, pt.pin, label)
}
