package series

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

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
