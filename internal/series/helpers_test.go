package series

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// t0 is the log time tests start at: 30 s into a minute, so that series
// cross minute boundaries.
var t0 = time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)

// logClock is a fake durable log: each entry gets the next position and a
// log time. It is the only clock the aggregator knows.
type logClock struct {
	now time.Time
	pos uint64
}

func newLog() *logClock { return &logClock{now: t0} }

// next returns the log time and position of an entry d after the previous.
func (l *logClock) next(d time.Duration) (time.Time, uint64) {
	l.now = l.now.Add(d)
	l.pos++
	return l.now, l.pos
}

// mkEvent is a normalized event about pod-a; opts adjust it.
func mkEvent(uid string, opts ...func(*eventgatev1.Event)) *eventgatev1.Event {
	ev := &eventgatev1.Event{
		Uid:                 uid,
		Name:                "pod-a." + uid,
		Namespace:           "default",
		EventTime:           timestamppb.New(t0.Add(-time.Hour)),
		ReportingController: "example.com/ctrl",
		ReportingInstance:   "ctrl-1",
		Action:              "Start",
		Reason:              "BackOff",
		Note:                "note of " + uid,
		Regarding:           &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "default", Name: "pod-a"},
		Type:                "Warning",
		Tenant:              &eventgatev1.Tenant{Type: "project", Name: "p1"},
		Labels:              map[string]string{"app": "a"},
	}
	for _, o := range opts {
		o(ev)
	}
	return ev
}

func withNote(n string) func(*eventgatev1.Event) { return func(ev *eventgatev1.Event) { ev.Note = n } }

// asSeries is what a series write of first looks like.
func asSeries(first *eventgatev1.Event, note string, count int32, last time.Time, state string) *eventgatev1.Event {
	ev := proto.Clone(first).(*eventgatev1.Event)
	ev.Note = note
	ev.Series = &eventgatev1.EventSeries{Count: count, LastObservedTime: timestamppb.New(last), State: state}
	return ev
}

// minutes builds Minutes from (minute start, count) pairs.
func minutes(pairs ...any) []MinuteCount {
	var ms []MinuteCount
	for i := 0; i < len(pairs); i += 2 {
		ms = append(ms, MinuteCount{Start: pairs[i].(time.Time), Count: int32(pairs[i+1].(int))})
	}
	return ms
}

var cmpOpts = gocmp.Options{protocmp.Transform(), gocmp.Comparer(func(x, y Key) bool { return x == y })}

func mustNew(t testing.TB, cfg Config) *Aggregator {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// logEntry is one entry of a fake partition log: an occurrence, or a tick
// when ev is nil.
type logEntry struct {
	ev  *eventgatev1.Event
	at  time.Time
	pos uint64
}

// must is a Decision of Observe that may not fail.
func must(d Decision, err error) Decision {
	if err != nil {
		panic(err)
	}
	return d
}

// readerOf reads the occurrences of log (ascending positions) by position,
// as the intake reads its stream: encoded afresh, as a log would return
// them, not the bytes the aggregator was given.
func readerOf(log []logEntry) Reader {
	return func(pos uint64) ([]byte, error) {
		i, ok := slices.BinarySearchFunc(log, pos, func(e logEntry, p uint64) int { return cmp.Compare(e.pos, p) })
		if !ok || log[i].ev == nil {
			return nil, fmt.Errorf("no occurrence at position %d", pos)
		}
		return proto.MarshalOptions{Deterministic: true}.Marshal(log[i].ev)
	}
}

// apply feeds one entry to a, as the partition owner does.
func apply(a *Aggregator, e logEntry) Decision {
	if e.ev == nil {
		return Decision{Writes: a.Tick(e.at, e.pos)}
	}
	if e.pos%2 == 0 {
		// Half the occurrences come encoded, as the intake passes them:
		// both paths go through every test, crashes and restores included.
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(e.ev)
		if err != nil {
			panic(err)
		}
		d := must(a.ObserveEncoded(e.ev, raw, e.at, e.pos))
		for _, w := range d.Writes {
			if w.Raw != nil && !bytes.Equal(w.Raw, raw) {
				panic("a Created write's Raw is not the occurrence's encoding")
			}
		}
		return d
	}
	return must(a.Observe(e.ev, e.at, e.pos))
}

// store is the events stream with duplicate detection by Write.ID. It
// checks the determinism the crash protocol relies on: a write published
// twice under one ID has the same content.
type store struct {
	t     testing.TB
	byID  map[string]Write
	at    map[string]time.Time // log time of the entry that produced the write
	order []string
}

func newStore(t testing.TB) *store {
	return &store{t: t, byID: map[string]Write{}, at: map[string]time.Time{}}
}

func (s *store) publish(w Write, at time.Time) {
	s.t.Helper()
	id := w.ID()
	if old, ok := s.byID[id]; ok {
		if !sameWrite(old, w) {
			s.t.Fatalf("write %s re-derived with other content (-first +again):\n%s", id, gocmp.Diff(old, w, cmpOpts))
		}
		return
	}
	s.byID[id] = w
	s.at[id] = at
	s.order = append(s.order, id)
}

// uidSummary is what the store says about one stored event.
type uidSummary struct {
	key         Key
	writes      int
	final       Write
	minutesSum  int64
	first, last time.Time // log times of its first and last write
}

func (s *store) summarize() map[string]*uidSummary {
	out := map[string]*uidSummary{}
	for _, id := range s.order {
		w := s.byID[id]
		uid := w.Event.GetTenant().GetType() + "/" + w.Event.GetTenant().GetName() + "/" + w.Event.GetUid()
		u := out[uid]
		if u == nil {
			u = &uidSummary{key: w.Key, first: s.at[id], last: s.at[id]}
			out[uid] = u
		}
		u.writes++
		if w.Seq > u.final.Seq {
			u.final = w
		}
		for _, m := range w.Minutes {
			u.minutesSum += int64(m.Count)
		}
		if at := s.at[id]; at.Before(u.first) {
			u.first = at
		} else if at.After(u.last) {
			u.last = at
		}
	}
	return out
}

// count is the number of occurrences a stored event stands for.
func (u *uidSummary) count() int64 {
	if s := u.final.Event.GetSeries(); s != nil {
		return int64(s.Count)
	}
	return 1
}

// sameWrite is cmp.Equal(x, y, cmpOpts), fast.
func sameWrite(x, y Write) bool {
	return x.Key == y.Key && x.Reason == y.Reason && x.Seq == y.Seq &&
		proto.Equal(x.Event, y.Event) &&
		slices.EqualFunc(x.Minutes, y.Minutes, func(a, b MinuteCount) bool { return a.Start.Equal(b.Start) && a.Count == b.Count })
}

// sameWrites compares two stores' writes by ID.
func sameWrites(t testing.TB, want, got *store) {
	t.Helper()
	for id, w := range want.byID {
		g, ok := got.byID[id]
		if !ok {
			t.Fatalf("write %s missing", id)
		}
		if !sameWrite(w, g) {
			t.Fatalf("write %s (-want +got):\n%s", id, gocmp.Diff(w, g, cmpOpts))
		}
	}
	for id := range got.byID {
		if _, ok := want.byID[id]; !ok {
			t.Fatalf("unexpected write %s: %v", id, got.byID[id])
		}
	}
}
