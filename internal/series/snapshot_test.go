package series

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// busyLog is a log with singletons, a clean series and a dirty series whose
// pending occurrences span two minutes.
func busyLog() []logEntry {
	l := newLog()
	var log []logEntry
	add := func(d time.Duration, ev *eventgatev1.Event) {
		at, pos := l.next(d)
		log = append(log, logEntry{ev: ev, at: at, pos: pos})
	}
	pod := func(name, uid, note string) *eventgatev1.Event {
		return mkEvent(uid, withNote(note), func(ev *eventgatev1.Event) { ev.Regarding.Name = name })
	}
	add(0, pod("a", "a1", "a first"))
	add(time.Second, pod("b", "b1", "b first"))
	add(time.Second, pod("b", "b2", "b second"))
	add(40*time.Second, nil) // flushes nothing: b is clean; heartbeat later
	add(time.Second, pod("c", "c1", "c first"))
	add(time.Second, pod("c", "c2", "c second"))
	add(time.Second, pod("c", "c3", "c third"))
	add(20*time.Second, pod("c", "c4", "c fourth"))
	add(time.Second, pod("d", "d1", "d first"))
	return log
}

func TestSnapshotRoundTrip(t *testing.T) {
	cfg := Config{FlushInterval: time.Minute, Heartbeat: 2 * time.Minute}
	a := mustNew(t, cfg)
	for _, e := range busyLog() {
		apply(a, e)
	}
	b, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Error("Snapshot(Restore(s)) != s")
	}
	if r.Position() != a.Position() {
		t.Errorf("Position %d, want %d", r.Position(), a.Position())
	}
	if got, want := r.Stats(), a.Stats(); got.Keys != want.Keys || got.Series != want.Series || got.Occurrences != 0 {
		t.Errorf("restored Stats = %+v, want the keys and series of %+v and no counts", got, want)
	}
	d1, ok1 := a.NextDue()
	d2, ok2 := r.NextDue()
	if !d1.Equal(d2) || ok1 != ok2 {
		t.Errorf("NextDue %v %v, want %v %v", d2, ok2, d1, ok1)
	}
	// Both continue identically, timers included.
	l := &logClock{now: busyLog()[len(busyLog())-1].at, pos: a.Position()}
	for i, d := range []time.Duration{time.Second, 30 * time.Second, time.Minute, 3 * time.Minute, time.Hour} {
		at, pos := l.next(d)
		var ev *eventgatev1.Event
		if i%2 == 0 {
			ev = mkEvent("x"+string(rune('0'+i)), func(ev *eventgatev1.Event) { ev.Regarding.Name = "c" })
		}
		want := apply(a, logEntry{ev, at, pos})
		got := apply(r, logEntry{ev, at, pos})
		if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
			t.Fatalf("entry %d (-original +restored):\n%s", i, diff)
		}
	}
}

// TestRestoreRedelivery is a crash mid-series: the new owner restores the
// last snapshot; the log redelivers entries the snapshot already counted
// (ignored) and entries after it (counted once), and the writes the old
// owner published after the snapshot come out again, identical.
func TestRestoreRedelivery(t *testing.T) {
	cfg := Config{FlushInterval: 10 * time.Second, Heartbeat: time.Minute, FinishAfter: 2 * time.Minute}
	var log []logEntry
	l := newLog()
	for i := range 200 {
		at, pos := l.next(time.Second)
		log = append(log, logEntry{ev: mkEvent("u" + string(rune(0x100+i))), at: at, pos: pos})
	}
	at, pos := l.next(time.Hour)
	log = append(log, logEntry{at: at, pos: pos})

	// Without a crash.
	ref := newStore(t)
	a := mustNew(t, cfg)
	for _, e := range log {
		for _, w := range apply(a, e).Writes {
			ref.publish(w, e.at)
		}
	}

	// Snapshot at entry 100, crash at entry 150 after publishing its writes.
	st := newStore(t)
	a = mustNew(t, cfg)
	var snap []byte
	for i, e := range log[:150] {
		for _, w := range apply(a, e).Writes {
			st.publish(w, e.at)
		}
		if i == 99 {
			var err error
			if snap, err = a.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, err := Restore(cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	if r.Position() != 100 {
		t.Fatalf("Position() = %d, want 100", r.Position())
	}
	for _, e := range log[90:] { // redelivered from before the snapshot
		d := apply(r, e)
		if e.pos <= 100 && (d.Outcome != Duplicate || len(d.Writes) > 0) {
			t.Fatalf("pos %d redelivered: %+v, want a bare Duplicate", e.pos, d)
		}
		if e.pos > 100 && e.ev != nil && d.Outcome != Counted {
			t.Fatalf("pos %d: %v, want counted", e.pos, d.Outcome)
		}
		for _, w := range d.Writes {
			st.publish(w, e.at) // re-derived writes must match the published ones
		}
	}
	if s := r.Stats(); s.Duplicates != 10 || s.Occurrences != 100 {
		t.Errorf("restored Stats = %+v", s)
	}
	if diff := cmp.Diff(ref.byID, st.byID, cmpOpts); diff != "" {
		t.Fatalf("stored writes (-no crash +crash):\n%s", diff)
	}
	final := st.byID[st.order[len(st.order)-1]]
	if s := final.Event.GetSeries(); s.GetCount() != 200 || s.GetState() != StateFinished {
		t.Errorf("final series = %v, want 200 Finished", s)
	}
}

func TestRestoreErrors(t *testing.T) {
	a := mustNew(t, Config{})
	for _, e := range busyLog() {
		apply(a, e)
	}
	good, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Version 1 snapshots, as earlier releases wrote them: every tracked
	// key's event, singletons first.
	snap := func(fields ...[]byte) []byte {
		b := protowire.AppendTag(nil, snapVersion, protowire.VarintType)
		b = protowire.AppendVarint(b, snapshotVersion)
		b = protowire.AppendTag(b, snapPosition, protowire.VarintType)
		b = protowire.AppendVarint(b, 100)
		b = protowire.AppendTag(b, snapClock, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeZigZag(t0.UnixNano()))
		for _, f := range fields {
			b = protowire.AppendTag(b, snapEntry, protowire.BytesType)
			b = protowire.AppendBytes(b, f)
		}
		return b
	}
	v1Single := func(ev *eventgatev1.Event, last int64, withEvent bool) []byte {
		var b []byte
		if withEvent {
			evb, err := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			b = protowire.AppendTag(b, entEvent, protowire.BytesType)
			b = protowire.AppendBytes(b, evb)
		}
		for _, f := range []struct {
			num protowire.Number
			v   uint64
		}{{entCount, 1}, {entLast, protowire.EncodeZigZag(last)}, {entLastWrite, protowire.EncodeZigZag(last)}, {entSeq, 1}} {
			b = protowire.AppendTag(b, f.num, protowire.VarintType)
			b = protowire.AppendVarint(b, f.v)
		}
		return b
	}
	okEntry := v1Single(mkEvent("u1"), t0.UnixNano(), true)
	olderEntry := v1Single(mkEvent("u2", func(ev *eventgatev1.Event) { ev.Regarding.Name = "pod-b" }), t0.UnixNano()-int64(time.Second), true)
	withField := func(base []byte, num protowire.Number, v uint64) []byte {
		b := append([]byte(nil), base...)
		b = protowire.AppendTag(b, num, protowire.VarintType)
		return protowire.AppendVarint(b, v)
	}
	unknown := append(append([]byte(nil), good...), protowire.AppendTag(nil, 99, protowire.BytesType)...)
	unknown = protowire.AppendBytes(unknown, []byte("from a newer release"))
	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"good", good, true},
		{"unknown fields are skipped", unknown, true},
		{"one hand-made entry", snap(okEntry), true},
		{"empty", nil, false},
		{"other version", withField(good, snapVersion, 7), false},
		{"truncated", good[:len(good)-3], false},
		{"garbage", []byte("not a snapshot at all"), false},
		{"key tracked twice", snap(okEntry, okEntry), false},
		{"singletons in log-time order", snap(olderEntry, okEntry), true},
		{"singletons out of order", snap(okEntry, olderEntry), false},
		{"singleton with count 2", snap(withField(okEntry, entCount, 2)), false},
		{"series with count 1", snap(withField(withField(okEntry, entOngoing, 1), entSeq, 2)), false},
		{"no writes", snap(withField(okEntry, entSeq, 0)), false},
		{"after the clock", snap(withField(okEntry, entLast, protowire.EncodeZigZag(t0.Add(time.Second).UnixNano()))), false},
		{"event without uid", snap(v1Single(nil, t0.UnixNano(), false)), false},
		{"bad event", snap(protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), okEntry...), entEvent, protowire.BytesType), []byte{0xff})), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Restore(Config{}, tc.b)
			if (err == nil) != tc.ok {
				t.Fatalf("Restore() = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrCorruptSnapshot) {
				t.Errorf("%v does not wrap ErrCorruptSnapshot", err)
			}
		})
	}
	if _, err := Restore(Config{MaxActive: -1}, good); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Restore with a bad config = %v", err)
	}
}

// FuzzRestore: Restore never panics, and what it accepts snapshots back to
// an equivalent state.
func FuzzRestore(f *testing.F) {
	a, _ := New(Config{})
	for _, e := range busyLog() {
		apply(a, e)
		b, _ := a.Snapshot()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Restore(Config{}, b)
		if err != nil {
			return
		}
		s, err := r.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		r2, err := Restore(Config{}, s)
		if err != nil {
			t.Fatalf("re-Restore: %v", err)
		}
		s2, _ := r2.Snapshot()
		if !bytes.Equal(s, s2) {
			t.Error("snapshot not stable")
		}
		r.NextDue()
		r.Tick(time.Unix(0, r.clock).Add(time.Hour), r.Position()+1)
	})
}
