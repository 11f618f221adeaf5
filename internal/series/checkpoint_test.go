package series

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// TestCheckpointIncremental: each singleton is written in one segment only,
// the head does not grow with the singletons, a singleton that started a
// series or whose window closed is not restored, and a restored aggregator
// is the same as the original (its full Snapshot is identical).
func TestCheckpointIncremental(t *testing.T) {
	cfg := Config{}
	a := mustNew(t, cfg)
	l := newLog()
	pod := func(name, uid string) *eventgatev1.Event {
		return mkEvent(uid, func(ev *eventgatev1.Event) { ev.Regarding.Name = name })
	}
	segs := map[uint64][]byte{}
	checkpoint := func(wantSingles int) Checkpoint {
		t.Helper()
		cp, err := a.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		if got := 0; cp.Segment != nil {
			p, err := parseSnapshot(cp.Segment.Data)
			if err != nil {
				t.Fatal(err)
			}
			got = len(p.singles) / singleRecLen
			if got != wantSingles {
				t.Fatalf("segment %d holds %d singletons, want %d", cp.Segment.ID, got, wantSingles)
			}
			segs[cp.Segment.ID] = cp.Segment.Data
		} else if wantSingles != 0 {
			t.Fatalf("no segment, want %d singletons", wantSingles)
		}
		return cp
	}
	observe := func(name, uid string, d time.Duration) Decision {
		at, pos := l.next(d)
		return must(a.Observe(pod(name, uid), at, pos))
	}

	for i := range 1000 {
		observe(fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i), time.Millisecond)
	}
	cp1 := checkpoint(1000)
	for i := range 10 {
		// A second after the p's: their windows close apart.
		d := time.Millisecond
		if i == 0 {
			d = time.Second
		}
		observe(fmt.Sprintf("q%d", i), fmt.Sprintf("v%d", i), d)
	}
	cp2 := checkpoint(10)
	if len(cp2.Head) > 200 {
		t.Errorf("head of %d bytes after 1010 singletons (%d after 1000): it should hold none of them", len(cp2.Head), len(cp1.Head))
	}
	if len(cp2.Live) != 2 || cp2.Live[0] != cp1.Segment.ID || cp2.Live[1] != cp2.Segment.ID {
		t.Fatalf("live segments %v, want [%d %d]", cp2.Live, cp1.Segment.ID, cp2.Segment.ID)
	}
	// p5 starts a series: its singleton leaves the first segment.
	if d := observe("p5", "again", time.Millisecond); d.Outcome != SeriesStarted {
		t.Fatalf("p5 again: %v", d.Outcome)
	}
	checkpoint(0)

	restore := func(head []byte) *Aggregator {
		t.Helper()
		r, err := RestoreCheckpoint(cfg, head, func(id uint64) ([]byte, error) {
			b, ok := segs[id]
			if !ok {
				return nil, errors.New("missing")
			}
			return b, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	same := func(r *Aggregator) {
		t.Helper()
		want, _ := a.Snapshot()
		got, _ := r.Snapshot()
		if !bytes.Equal(want, got) {
			t.Fatal("restored aggregator differs from the original")
		}
	}
	cp := checkpoint(0)
	r := restore(cp.Head)
	same(r)
	if s := r.Stats(); s.Keys != 1010 || s.Series != 1 {
		t.Fatalf("restored %d keys, %d series; want 1010, 1", s.Keys, s.Series)
	}
	// The restored aggregator checkpoints on from there: p5 stays out.
	a = r
	cp = checkpoint(0)
	same(restore(cp.Head))

	// The first segment's window closes: it is no longer live.
	observe("late", "w", cfg.withDefaults().Window-500*time.Millisecond)
	cp = checkpoint(1)
	if len(cp.Live) != 2 || cp.Live[0] != cp2.Segment.ID {
		t.Fatalf("live segments after the first window closed: %v", cp.Live)
	}
	same(restore(cp.Head))
}

// TestRestoreCheckpointErrors: a missing or mismatched segment fails the
// restore; it does not restore a partial state.
func TestRestoreCheckpointErrors(t *testing.T) {
	a := mustNew(t, Config{})
	l := newLog()
	at, pos := l.next(0)
	must(a.Observe(mkEvent("u1"), at, pos))
	cp, err := a.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreCheckpoint(Config{}, cp.Head, func(uint64) ([]byte, error) { return nil, errors.New("gone") }); err == nil {
		t.Error("restore with a missing segment succeeded")
	}
	other := mustNew(t, Config{})
	at, pos = l.next(time.Second)
	must(other.Observe(mkEvent("u2"), at, pos))
	ocp, _ := other.Checkpoint()
	if _, err := RestoreCheckpoint(Config{}, cp.Head, func(uint64) ([]byte, error) { return ocp.Segment.Data, nil }); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("restore with another segment: %v", err)
	}
}

// TestRestoreCheckpointWithoutALostSegment: a segment reader that says
// ErrSegmentLost restores the checkpoint without that segment's
// singletons (their next occurrence is a new singleton), keeps the others
// and the series, and the next checkpoint no longer names the lost
// segment. NewAt is an empty aggregator that ignores what is at or below
// its position.
func TestRestoreCheckpointWithoutALostSegment(t *testing.T) {
	a := mustNew(t, Config{})
	l := newLog()
	pod := func(name, uid string) *eventgatev1.Event {
		return mkEvent(uid, func(ev *eventgatev1.Event) { ev.Regarding.Name = name })
	}
	var log []logEntry
	observe := func(a *Aggregator, name, uid string) Decision {
		t.Helper()
		at, pos := l.next(time.Millisecond)
		ev := pod(name, uid)
		log = append(log, logEntry{pos: pos, ev: proto.Clone(ev).(*eventgatev1.Event)})
		return must(a.Observe(ev, at, pos))
	}
	observe(a, "lost", "u1")
	observe(a, "series", "u2")
	observe(a, "series", "u3")
	cp1, err := a.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	observe(a, "kept", "u4")
	cp2, err := a.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	r, err := RestoreCheckpoint(Config{}, cp2.Head, func(id uint64) ([]byte, error) {
		switch id {
		case cp1.Segment.ID:
			return nil, ErrSegmentLost
		case cp2.Segment.ID:
			return cp2.Segment.Data, nil
		}
		return nil, fmt.Errorf("segment %d", id)
	})
	if err != nil {
		t.Fatal(err)
	}
	r.SetReader(func(pos uint64) ([]byte, error) { return readerOf(log)(pos) })
	if s := r.Stats(); s.Keys != 2 || s.Series != 1 {
		t.Fatalf("restored %d keys, %d series; want 2 (the series and the kept singleton), 1", s.Keys, s.Series)
	}
	if d := observe(r, "lost", "u5"); d.Outcome != Created {
		t.Fatalf("the lost singleton's key again: %v, want a new singleton", d.Outcome)
	}
	if d := observe(r, "kept", "u6"); d.Outcome != SeriesStarted {
		t.Fatalf("the kept singleton's key again: %v, want its series started", d.Outcome)
	}
	if d := observe(r, "series", "u7"); d.Outcome != Counted {
		t.Fatalf("the series' key again: %v, want it counted", d.Outcome)
	}
	cp3, err := r.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range cp3.Live {
		if id == cp1.Segment.ID {
			t.Fatalf("live segments %v name the lost segment %d", cp3.Live, id)
		}
	}

	e, err := NewAt(Config{}, r.Position())
	if err != nil {
		t.Fatal(err)
	}
	at, _ := l.next(time.Millisecond)
	if d := must(e.Observe(pod("series", "u8"), at, r.Position())); d.Outcome != Duplicate {
		t.Fatalf("an entry at NewAt's position: %v, want a redelivery ignored", d.Outcome)
	}
	if d := observe(e, "series", "u9"); d.Outcome != Created || e.Stats().Keys != 1 {
		t.Fatalf("past NewAt's position: %v with %d keys, want a new singleton", d.Outcome, e.Stats().Keys)
	}
}

// FuzzRestoreCheckpoint: RestoreCheckpoint never panics on any head or
// segment.
func FuzzRestoreCheckpoint(f *testing.F) {
	a := mustNew(f, Config{})
	for _, e := range busyLog() {
		apply(a, e)
	}
	cp, err := a.Checkpoint()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cp.Head, cp.Segment.Data)
	f.Fuzz(func(t *testing.T, head, seg []byte) {
		_, _ = RestoreCheckpoint(Config{}, head, func(uint64) ([]byte, error) { return seg, nil })
	})
}
