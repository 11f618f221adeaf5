package series

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero is the defaults", Config{}, true},
		{"explicit", Config{Window: time.Minute, FlushInterval: time.Second, Heartbeat: time.Minute, FinishAfter: 2 * time.Minute, MaxActive: 1}, true},
		{"flush equals heartbeat", Config{FlushInterval: time.Minute, Heartbeat: time.Minute}, true},
		{"negative window", Config{Window: -1}, false},
		{"negative max active", Config{MaxActive: -1}, false},
		{"budget below 64 KiB", Config{MaxBytes: 1 << 10}, false},
		{"flush above heartbeat", Config{FlushInterval: 10 * time.Minute}, false},
		{"heartbeat equals finish", Config{Heartbeat: 6 * time.Minute}, false},
		{"heartbeat above finish", Config{FinishAfter: time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			if _, err := New(tc.cfg); (err == nil) != tc.ok {
				t.Errorf("New() = %v, want ok %v", err, tc.ok)
			}
		})
	}
	a := mustNew(t, Config{})
	want := Config{Window: DefaultWindow, FlushInterval: DefaultFlushInterval, Heartbeat: DefaultHeartbeat, FinishAfter: DefaultFinishAfter, MaxBytes: DefaultMaxBytes}
	if diff := cmp.Diff(want, a.Config()); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func TestKeyOf(t *testing.T) {
	base := mkEvent("u1")
	for _, tc := range []struct {
		name string
		mod  func(*eventgatev1.Event)
		same bool
	}{
		{"other uid, name, note, labels, eventTime, namespace", func(ev *eventgatev1.Event) {
			ev.Uid, ev.Name, ev.Note, ev.Namespace = "u2", "other", "other note", "elsewhere"
			ev.Labels = map[string]string{"x": "y"}
			ev.Annotations = map[string]string{"x": "y"}
			ev.Metadata = map[string]string{"x": "y"}
			ev.EventTime = timestamppb.New(t0.Add(24 * time.Hour))
			ev.Series = &eventgatev1.EventSeries{Count: 7}
		}, true},
		{"absent related equals empty related", func(ev *eventgatev1.Event) { ev.Related = &eventgatev1.ObjectReference{} }, true},
		{"type", func(ev *eventgatev1.Event) { ev.Type = "Normal" }, false},
		{"tenant name", func(ev *eventgatev1.Event) { ev.Tenant.Name = "p2" }, false},
		{"tenant type", func(ev *eventgatev1.Event) { ev.Tenant.Type = "organization" }, false},
		{"action", func(ev *eventgatev1.Event) { ev.Action = "Stop" }, false},
		{"reason", func(ev *eventgatev1.Event) { ev.Reason = "Killing" }, false},
		{"reporting controller", func(ev *eventgatev1.Event) { ev.ReportingController = "x" }, false},
		{"reporting instance", func(ev *eventgatev1.Event) { ev.ReportingInstance = "ctrl-2" }, false},
		{"regarding name", func(ev *eventgatev1.Event) { ev.Regarding.Name = "pod-b" }, false},
		{"regarding uid", func(ev *eventgatev1.Event) { ev.Regarding.Uid = "1234" }, false},
		{"regarding field path", func(ev *eventgatev1.Event) { ev.Regarding.FieldPath = "spec.containers{app}" }, false},
		{"related", func(ev *eventgatev1.Event) { ev.Related = &eventgatev1.ObjectReference{Kind: "Node", Name: "n1"} }, false},
		{"field boundaries", func(ev *eventgatev1.Event) { ev.Action, ev.Reason = "StartBack", "Off" }, false},
		{"regarding moved to related", func(ev *eventgatev1.Event) { ev.Related, ev.Regarding = ev.Regarding, nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := mkEvent("u1")
			tc.mod(ev)
			if got := KeyOf(ev) == KeyOf(base); got != tc.same {
				t.Errorf("same key = %v, want %v", got, tc.same)
			}
			if got := KeyOf(ev).Hash() == KeyOf(base).Hash(); got != tc.same {
				t.Errorf("same hash = %v, want %v", got, tc.same)
			}
			if HashOf(ev) != KeyOf(ev).Hash() {
				t.Errorf("HashOf = %x, KeyOf(ev).Hash() = %x", HashOf(ev), KeyOf(ev).Hash())
			}
		})
	}
	if KeyOf(base).IsZero() || !(Key{}).IsZero() {
		t.Error("IsZero")
	}
	if s := KeyOf(base).String(); len(s) != 16 {
		t.Errorf("String() = %q, want 16 hex digits", s)
	}
}

// FuzzKeyOf checks that keys are equal exactly when the tuples are.
func FuzzKeyOf(f *testing.F) {
	f.Add("a", "b", "c", "d", "", "x")
	f.Add("ab", "", "c", "", "d", "x")
	f.Fuzz(func(t *testing.T, a1, r1, n1, a2, r2, n2 string) {
		e1 := mkEvent("u1", func(ev *eventgatev1.Event) { ev.Action, ev.Reason, ev.Regarding.Name = a1, r1, n1 })
		e2 := mkEvent("u2", func(ev *eventgatev1.Event) { ev.Action, ev.Reason, ev.Regarding.Name = a2, r2, n2 })
		same := a1 == a2 && r1 == r2 && n1 == n2
		if got := KeyOf(e1) == KeyOf(e2); got != same {
			t.Errorf("keys equal = %v for tuples equal = %v", got, same)
		}
		if HashOf(e1) != KeyOf(e1).Hash() {
			t.Errorf("HashOf = %x, KeyOf(ev).Hash() = %x (a key of %d bytes)", HashOf(e1), KeyOf(e1).Hash(), len(KeyOf(e1).s))
		}
	})
}

// step is one entry of a scripted log and what it must return.
type step struct {
	after time.Duration      // log time since the previous entry
	ev    *eventgatev1.Event // nil: a tick
	want  Decision           // for a tick, only Writes
}

// run feeds the steps to a and compares every result.
func run(t *testing.T, a *Aggregator, l *logClock, steps []step) {
	t.Helper()
	for i, s := range steps {
		at, pos := l.next(s.after)
		got := apply(a, logEntry{ev: s.ev, at: at, pos: pos})
		if diff := cmp.Diff(s.want, got, cmpOpts); diff != "" {
			t.Fatalf("step %d at %v (-want +got):\n%s", i, at.Sub(t0), diff)
		}
	}
}

func TestLifecycle(t *testing.T) {
	cfg := Config{Window: 6 * time.Minute, FlushInterval: 30 * time.Second, Heartbeat: 2 * time.Minute, FinishAfter: 3 * time.Minute}
	a := mustNew(t, cfg)
	e1 := mkEvent("u1", withNote("n1"))
	k := KeyOf(e1)
	m0, m1 := t0.Truncate(time.Minute), t0.Truncate(time.Minute).Add(time.Minute)
	late := mkEvent("u9", withNote("again"))
	run(t, a, newLog(), []step{
		// t0: stored as a singleton.
		{0, e1, Decision{Outcome: Created, UID: "u1", Writes: []Write{
			{Key: k, Reason: ReasonCreated, Seq: 1, Event: e1, Minutes: minutes(m0, 1)},
		}}},
		// +10s: the same event, now a series of 2, with the new note.
		{10 * time.Second, mkEvent("u2", withNote("n2")), Decision{Outcome: SeriesStarted, UID: "u1", Writes: []Write{
			{Key: k, Reason: ReasonStarted, Seq: 2, Event: asSeries(e1, "n2", 2, t0.Add(10*time.Second), StateOngoing), Minutes: minutes(m0, 1)},
		}}},
		// +20s, +30s: counted in memory only.
		{10 * time.Second, mkEvent("u3", withNote("n3")), Decision{Outcome: Counted, UID: "u1"}},
		{10 * time.Second, mkEvent("u4", withNote("n4")), Decision{Outcome: Counted, UID: "u1"}},
		// +40s: the flush due at +40s (30s after the last write) goes out
		// before this occurrence is counted.
		{10 * time.Second, mkEvent("u5", withNote("n5")), Decision{Outcome: Counted, UID: "u1", Writes: []Write{
			{Key: k, Reason: ReasonFlush, Seq: 3, Event: asSeries(e1, "n4", 4, t0.Add(30*time.Second), StateOngoing), Minutes: minutes(m0, 1, m1, 1)},
		}}},
		// +50s: the next flush is not due before +70s.
		{10 * time.Second, nil, Decision{}},
		{20*time.Second - 1, nil, Decision{}},
		{1, nil, Decision{Writes: []Write{
			{Key: k, Reason: ReasonFlush, Seq: 4, Event: asSeries(e1, "n5", 5, t0.Add(40*time.Second), StateOngoing), Minutes: minutes(m1, 1)},
		}}},
		// Unchanged: a heartbeat at +70s+2m, then nothing more until finish.
		{2*time.Minute - 1, nil, Decision{}},
		{1, nil, Decision{Writes: []Write{
			{Key: k, Reason: ReasonHeartbeat, Seq: 5, Event: asSeries(e1, "n5", 5, t0.Add(40*time.Second), StateOngoing)},
		}}},
		// Exactly FinishAfter (3m) after the last occurrence at +40s: not yet.
		{30 * time.Second, nil, Decision{}},
		// Just over: finished with the final count.
		{1, nil, Decision{Writes: []Write{
			{Key: k, Reason: ReasonFinished, Seq: 6, Event: asSeries(e1, "n5", 5, t0.Add(40*time.Second), StateFinished)},
		}}},
		// A later isomorphic event is a new singleton with its own uid.
		{10 * time.Second, late, Decision{Outcome: Created, UID: "u9", Writes: []Write{
			{Key: k, Reason: ReasonCreated, Seq: 1, Event: late, Minutes: minutes(t0.Add(4*time.Minute).Truncate(time.Minute), 1)},
		}}},
	})
	want := Stats{Keys: 1, Occurrences: 6, Folded: 3}
	want.Writes[ReasonCreated] = 2
	want.Writes[ReasonStarted] = 1
	want.Writes[ReasonFlush] = 2
	want.Writes[ReasonHeartbeat] = 1
	want.Writes[ReasonFinished] = 1
	got := a.Stats()
	if got.Bytes <= 0 || got.Bytes > DefaultMaxBytes {
		t.Errorf("Stats.Bytes = %d, want the budget's use", got.Bytes)
	}
	got.Bytes = 0
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	if got := want.TotalWrites(); got != 7 {
		t.Errorf("TotalWrites() = %d, want 7", got)
	}
}

func TestWindowEdges(t *testing.T) {
	const w = 6 * time.Minute
	for _, tc := range []struct {
		name   string
		tickAt time.Duration // a tick this long after the first, if > 0
		gap    time.Duration
		want   Outcome
	}{
		{"same log time", 0, 0, SeriesStarted},
		{"just inside", 0, w - 1, SeriesStarted},
		{"exactly at the window", 0, w, SeriesStarted},
		{"exactly at the window after a tick at the window", w, w, SeriesStarted},
		{"just over", 0, w + 1, Created},
		{"just over after a tick forgot the singleton", w + 1, w + 1, Created},
		{"long after", 0, time.Hour, Created},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mustNew(t, Config{Window: w})
			l := newLog()
			at, pos := l.next(0)
			must(a.Observe(mkEvent("u1"), at, pos))
			if tc.tickAt > 0 {
				at, pos := l.next(tc.tickAt)
				if ws := a.Tick(at, pos); len(ws) != 0 {
					t.Fatalf("tick wrote %v", ws)
				}
				l.now = t0 // the occurrence's gap is measured from the first
			}
			at, pos = l.next(tc.gap)
			d := must(a.Observe(mkEvent("u2"), at, pos))
			if d.Outcome != tc.want {
				t.Fatalf("Outcome = %v, want %v", d.Outcome, tc.want)
			}
			wantUID := "u1"
			if tc.want == Created {
				wantUID = "u2"
			}
			if d.UID != wantUID {
				t.Errorf("UID = %q, want %q", d.UID, wantUID)
			}
		})
	}
}

func TestFinishEdges(t *testing.T) {
	const fin = 6 * time.Minute
	for _, tc := range []struct {
		name string
		gap  time.Duration
		want []Reason // writes of the occurrence after the gap
		out  Outcome
	}{
		// The heartbeat (due FinishAfter-1s after the last write) goes out
		// first; the occurrence is then counted into the same series.
		{"exactly at FinishAfter continues", fin, []Reason{ReasonHeartbeat}, Counted},
		{"just over finishes, then a new singleton", fin + 1, []Reason{ReasonFinished, ReasonCreated}, Created},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Heartbeats as late as they may be, to see little besides the finish.
			a := mustNew(t, Config{FinishAfter: fin, FlushInterval: fin - time.Second, Heartbeat: fin - time.Second})
			l := newLog()
			for _, uid := range []string{"u1", "u2"} {
				at, pos := l.next(time.Second)
				must(a.Observe(mkEvent(uid), at, pos))
			}
			at, pos := l.next(tc.gap)
			d := must(a.Observe(mkEvent("u3"), at, pos))
			if d.Outcome != tc.out {
				t.Errorf("Outcome = %v, want %v", d.Outcome, tc.out)
			}
			var got []Reason
			for _, w := range d.Writes {
				got = append(got, w.Reason)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("writes (-want +got):\n%s", diff)
			}
			if tc.out == Created {
				fw := d.Writes[0]
				if s := fw.Event.GetSeries(); s.GetCount() != 2 || s.GetState() != StateFinished || fw.Event.GetUid() != "u1" {
					t.Errorf("finish write = %v", fw.Event)
				}
			}
		})
	}
}

func TestFlushAtMostEveryInterval(t *testing.T) {
	cfg := Config{} // defaults: flush 30s
	a := mustNew(t, cfg)
	l := newLog()
	var flushes []time.Time
	total := 0
	for i := range 600 { // one a second for 10 minutes
		at, pos := l.next(time.Second)
		d := must(a.Observe(mkEvent("u"+string(rune('a'+i%26))), at, pos))
		total++
		for _, w := range d.Writes {
			if w.Reason == ReasonFlush {
				flushes = append(flushes, at)
			}
		}
	}
	for i := 1; i < len(flushes); i++ {
		if gap := flushes[i].Sub(flushes[i-1]); gap < cfg.withDefaults().FlushInterval {
			t.Errorf("flushes %d and %d only %v apart", i-1, i, gap)
		}
	}
	if len(flushes) < 18 || len(flushes) > 20 {
		t.Errorf("%d flushes in 10 minutes, want about 19", len(flushes))
	}
	if s := a.Stats(); s.Folded != uint64(total-2) || s.Writes[ReasonHeartbeat] != 0 {
		t.Errorf("Stats = %+v", s)
	}
}

func TestMinutesSumToCount(t *testing.T) {
	a := mustNew(t, Config{})
	l := newLog()
	var ws []Write
	n := 0
	// Irregular bursts over 5 minutes.
	for i := range 500 {
		at, pos := l.next(time.Duration(i%7) * 100 * time.Millisecond)
		ws = append(ws, must(a.Observe(mkEvent("u"), at, pos)).Writes...)
		n++
	}
	at, pos := l.next(time.Hour)
	ws = append(ws, a.Tick(at, pos)...)
	perMinute := map[time.Time]int32{}
	var sum int32
	for _, w := range ws {
		for i, m := range w.Minutes {
			if m.Start != m.Start.Truncate(time.Minute) || m.Start.Location() != time.UTC {
				t.Errorf("minute %v not a UTC minute start", m.Start)
			}
			if i > 0 && !w.Minutes[i-1].Start.Before(m.Start) {
				t.Errorf("minutes not ascending: %v", w.Minutes)
			}
			perMinute[m.Start] += m.Count
			sum += m.Count
		}
	}
	final := ws[len(ws)-1]
	if final.Reason != ReasonFinished || final.Event.Series.Count != int32(n) || sum != int32(n) {
		t.Fatalf("final %v count %d, minutes sum %d, want %d", final.Reason, final.Event.GetSeries().GetCount(), sum, n)
	}
	// Recount the log by minute.
	want := map[time.Time]int32{}
	l2 := newLog()
	for i := range 500 {
		at, _ := l2.next(time.Duration(i%7) * 100 * time.Millisecond)
		want[at.Truncate(time.Minute)]++
	}
	if diff := cmp.Diff(want, perMinute); diff != "" {
		t.Errorf("per-minute counts (-want +got):\n%s", diff)
	}
}

func TestNote(t *testing.T) {
	a := mustNew(t, Config{FlushInterval: time.Second, Heartbeat: time.Second})
	l := newLog()
	first := mkEvent("u1", withNote("pulling image"))
	notes := []string{"pulling image", "back-off 10s", "back-off 20s", "back-off 40s"}
	var last Write
	for i, n := range notes {
		at, pos := l.next(2 * time.Second)
		ev := first
		if i > 0 {
			ev = mkEvent("u"+n, withNote(n))
		}
		d := must(a.Observe(ev, at, pos))
		if i > 0 && d.UID != "u1" {
			t.Fatalf("note %q changed the key: %v", n, d)
		}
		for _, w := range d.Writes {
			last = w
		}
		if i == 1 && last.Event.Note != "back-off 10s" {
			t.Errorf("started write note = %q", last.Event.Note)
		}
	}
	at, pos := l.next(time.Second)
	ws := a.Tick(at, pos)
	if len(ws) != 1 || ws[0].Event.Note != "back-off 40s" || ws[0].Event.Uid != "u1" {
		t.Fatalf("flush = %v, want the latest note on u1", ws)
	}
	if first.Note != "pulling image" || first.Series != nil {
		t.Errorf("Observe modified the caller's event: %v", first)
	}
}

func TestKeysNeverMerge(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*eventgatev1.Event)
	}{
		{"tenants", func(ev *eventgatev1.Event) { ev.Tenant = &eventgatev1.Tenant{Type: "project", Name: "p2"} }},
		{"types", func(ev *eventgatev1.Event) { ev.Type = "Normal" }},
		{"reporting instances", func(ev *eventgatev1.Event) { ev.ReportingInstance = "ctrl-2" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mustNew(t, Config{})
			l := newLog()
			for i := range 10 {
				var mods []func(*eventgatev1.Event)
				if i%2 == 1 {
					mods = append(mods, tc.mod)
				}
				at, pos := l.next(time.Second)
				d := must(a.Observe(mkEvent(string(rune('a'+i)), mods...), at, pos))
				want, wantUID := Counted, ""
				switch i {
				case 0, 1:
					want, wantUID = Created, string(rune('a'+i))
				case 2, 3:
					want, wantUID = SeriesStarted, string(rune('a'+i-2))
				default:
					wantUID = string(rune('a' + i%2))
				}
				if d.Outcome != want || d.UID != wantUID {
					t.Errorf("occurrence %d: %v %q, want %v %q", i, d.Outcome, d.UID, want, wantUID)
				}
			}
			if s := a.Stats(); s.Series != 2 {
				t.Errorf("%d series, want 2", s.Series)
			}
		})
	}
}

// TestEventTimeIgnored: the emitter's eventTime, however skewed, neither
// splits nor merges series; windowing uses log time only, and the stored
// event keeps the first occurrence's eventTime.
func TestEventTimeIgnored(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offset time.Duration // of the second occurrence's eventTime from the first's
		gap    time.Duration // log time between them
		want   Outcome
	}{
		{"a day in the past, close in log time", -24 * time.Hour, time.Second, SeriesStarted},
		{"a year in the future, close in log time", 365 * 24 * time.Hour, time.Second, SeriesStarted},
		{"same eventTime, far in log time", 0, time.Hour, Created},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mustNew(t, Config{})
			l := newLog()
			first := mkEvent("u1")
			at, pos := l.next(0)
			must(a.Observe(first, at, pos))
			second := mkEvent("u2", func(ev *eventgatev1.Event) {
				ev.EventTime = timestamppb.New(first.EventTime.AsTime().Add(tc.offset))
			})
			at, pos = l.next(tc.gap)
			d := must(a.Observe(second, at, pos))
			if d.Outcome != tc.want {
				t.Fatalf("Outcome = %v, want %v", d.Outcome, tc.want)
			}
			w := d.Writes[len(d.Writes)-1]
			wantTime := first.EventTime
			if tc.want == Created {
				wantTime = second.EventTime
			}
			if diff := cmp.Diff(wantTime, w.Event.EventTime, cmpOpts); diff != "" {
				t.Errorf("stored eventTime (-want +got):\n%s", diff)
			}
			if tc.want == SeriesStarted && !w.Event.Series.LastObservedTime.AsTime().Equal(at) {
				t.Errorf("lastObservedTime = %v, want the log time %v", w.Event.Series.LastObservedTime.AsTime(), at)
			}
		})
	}
}

// TestLogTimeSteppingBack: a log timestamp earlier than one already seen (a
// stream leader change between servers with skewed clocks) counts as the
// latest time seen: it neither ends a series nor moves lastObservedTime back.
func TestLogTimeSteppingBack(t *testing.T) {
	a := mustNew(t, Config{FlushInterval: time.Second, Heartbeat: time.Second})
	l := newLog()
	for _, uid := range []string{"u1", "u2", "u3"} {
		at, pos := l.next(time.Second)
		must(a.Observe(mkEvent(uid), at, pos))
	}
	latest := l.now
	at, pos := l.next(-10 * time.Minute)
	if d := must(a.Observe(mkEvent("u4"), at, pos)); d.Outcome != Counted {
		t.Fatalf("Outcome = %v, want counted", d.Outcome)
	}
	at, pos = l.next(10*time.Minute + time.Second)
	ws := a.Tick(at, pos)
	if len(ws) != 1 || ws[0].Event.Series.Count != 4 || !ws[0].Event.Series.LastObservedTime.AsTime().Equal(latest) {
		t.Fatalf("flush = %v, want count 4 last observed %v", ws, latest)
	}
}

// TestTickSkew: ticks are stamped by the log, not by the replica that asks
// for them. A tick whose log time is still short of NextDue (the server's
// clock behind the replica's) does nothing; the next one does the work.
func TestTickSkew(t *testing.T) {
	a := mustNew(t, Config{})
	l := newLog()
	for _, uid := range []string{"u1", "u2", "u3"} {
		at, pos := l.next(time.Second)
		must(a.Observe(mkEvent(uid), at, pos))
	}
	due, ok := a.NextDue()
	if want := t0.Add(2 * time.Second).Add(DefaultFlushInterval); !ok || !due.Equal(want) {
		t.Fatalf("NextDue() = %v, %v, want %v", due, ok, want)
	}
	l.now = due.Add(-500 * time.Millisecond)
	at, pos := l.next(0)
	if ws := a.Tick(at, pos); len(ws) != 0 {
		t.Fatalf("early tick wrote %v", ws)
	}
	if again, _ := a.NextDue(); !again.Equal(due) {
		t.Errorf("NextDue moved to %v", again)
	}
	at, pos = l.next(time.Second)
	if ws := a.Tick(at, pos); len(ws) != 1 || ws[0].Reason != ReasonFlush {
		t.Fatalf("tick wrote %v, want one flush", ws)
	}
}

func TestNextDue(t *testing.T) {
	cfg := Config{Window: 6 * time.Minute, FlushInterval: 30 * time.Second, Heartbeat: 2 * time.Minute, FinishAfter: 3 * time.Minute}
	a := mustNew(t, cfg)
	if _, ok := a.NextDue(); ok {
		t.Fatal("empty aggregator has a timer")
	}
	l := newLog()
	next := func() time.Duration {
		t.Helper()
		d, ok := a.NextDue()
		if !ok {
			t.Fatal("no timer")
		}
		return d.Sub(t0)
	}
	at, pos := l.next(0)
	must(a.Observe(mkEvent("u1"), at, pos))
	if d, ok := a.NextDue(); ok {
		t.Errorf("singleton: NextDue at %v; a singleton needs no tick", d)
	}
	at, pos = l.next(10 * time.Second)
	must(a.Observe(mkEvent("u2"), at, pos))
	if got, want := next(), 10*time.Second+2*time.Minute; got != want {
		t.Errorf("clean series: NextDue at %v, want %v (heartbeat)", got, want)
	}
	at, pos = l.next(10 * time.Second)
	must(a.Observe(mkEvent("u3"), at, pos))
	if got, want := next(), 40*time.Second; got != want {
		t.Errorf("dirty series: NextDue at %v, want %v (flush)", got, want)
	}
	at, pos = l.next(20 * time.Second)
	a.Tick(at, pos)
	// Flushed at +40s: the heartbeat (+2m40s) comes before the finish (last
	// occurrence at +20s, so +3m20s+1ns).
	if got, want := next(), 40*time.Second+2*time.Minute; got != want {
		t.Errorf("after flush: NextDue at %v, want %v", got, want)
	}
	at, pos = l.next(2 * time.Minute)
	a.Tick(at, pos)
	if got, want := next(), 20*time.Second+3*time.Minute+1; got != want {
		t.Errorf("after heartbeat: NextDue at %v, want %v (finish)", got, want)
	}
}

func TestDuplicatePositions(t *testing.T) {
	a := mustNew(t, Config{})
	at := t0
	must(a.Observe(mkEvent("u1"), at, 5))
	for _, pos := range []uint64{0, 1, 5} {
		if d := must(a.Observe(mkEvent("u2"), at, pos)); d.Outcome != Duplicate || d.Writes != nil || d.UID != "" {
			t.Errorf("pos %d: %+v, want a bare Duplicate", pos, d)
		}
		if ws := a.Tick(at.Add(time.Hour), pos); ws != nil {
			t.Errorf("tick at pos %d wrote %v", pos, ws)
		}
	}
	if d := must(a.Observe(mkEvent("u2"), at, 6)); d.Outcome != SeriesStarted {
		t.Errorf("pos 6: %v, want started", d.Outcome)
	}
	if s := a.Stats(); s.Duplicates != 6 || s.Occurrences != 2 || a.Position() != 6 {
		t.Errorf("Stats = %+v, Position = %d", s, a.Position())
	}
}

func TestCountLimit(t *testing.T) {
	a := mustNew(t, Config{})
	l := newLog()
	for _, uid := range []string{"u1", "u2"} {
		at, pos := l.next(time.Second)
		must(a.Observe(mkEvent(uid), at, pos))
	}
	e := a.entries[KeyOf(mkEvent("x")).s]
	e.count = math.MaxInt32 - 1
	at, pos := l.next(time.Second)
	if d := must(a.Observe(mkEvent("u3"), at, pos)); d.Outcome != Counted {
		t.Fatalf("Outcome = %v", d.Outcome)
	}
	at, pos = l.next(time.Second)
	d := must(a.Observe(mkEvent("u4"), at, pos))
	if d.Outcome != Created || d.UID != "u4" || len(d.Writes) != 2 {
		t.Fatalf("at the int32 limit: %+v", d)
	}
	if w := d.Writes[0]; w.Reason != ReasonFinished || w.Event.Series.Count != math.MaxInt32 || w.Event.Series.State != StateFinished {
		t.Errorf("closing write = %v %v", w.Reason, w.Event.Series)
	}
}

func TestCap(t *testing.T) {
	a := mustNew(t, Config{MaxActive: 3, FlushInterval: time.Minute, Heartbeat: time.Minute})
	l := newLog()
	ev := func(name string) *eventgatev1.Event {
		return mkEvent(name+"-"+string(rune('0'+l.pos%10)), func(ev *eventgatev1.Event) { ev.Regarding.Name = name })
	}
	occurrences := map[Key]int{}
	st := newStore(t)
	obs := func(name string, want Outcome, wantReasons ...Reason) {
		t.Helper()
		e := ev(name)
		at, pos := l.next(time.Second)
		d := must(a.Observe(e, at, pos))
		occurrences[KeyOf(e)]++
		var got []Reason
		for _, w := range d.Writes {
			got = append(got, w.Reason)
			st.publish(w, at)
		}
		if d.Outcome != want {
			t.Errorf("%s: Outcome %v, want %v", name, d.Outcome, want)
		}
		if diff := cmp.Diff(wantReasons, got); diff != "" {
			t.Errorf("%s: writes (-want +got):\n%s", name, diff)
		}
	}
	obs("a", Created, ReasonCreated)
	obs("b", Created, ReasonCreated)
	obs("c", Created, ReasonCreated)
	// Full of singletons: the oldest (a) is forgotten, silently but counted.
	obs("d", Created, ReasonCreated)
	if s := a.Stats(); s.EvictedSingletons != 1 || s.Keys != 3 {
		t.Errorf("Stats = %+v", s)
	}
	// a again: a new singleton (b is now the oldest and goes).
	obs("a", Created, ReasonCreated)
	obs("c", SeriesStarted, ReasonStarted)
	obs("d", SeriesStarted, ReasonStarted)
	obs("a", SeriesStarted, ReasonStarted)
	obs("c", Counted)
	obs("d", Counted)
	// Every tracked key is a series: the least recently observed one (a)
	// is finished early, with its exact count.
	obs("e", Created, ReasonEvicted, ReasonCreated)
	if s := a.Stats(); s.EvictedSingletons != 2 || s.Writes[ReasonEvicted] != 1 || s.Keys != 3 || s.Series != 2 {
		t.Errorf("Stats = %+v", s)
	}
	obs("a", Created, ReasonCreated) // e, the only singleton, goes
	obs("c", Counted)
	at, pos := l.next(time.Hour)
	for _, w := range a.Tick(at, pos) {
		st.publish(w, at)
	}
	if s := a.Stats(); s.Keys != 0 {
		t.Errorf("%d keys left", s.Keys)
	}
	// No count is lost: per key, the stored events add up to the occurrences.
	got := map[Key]int{}
	for _, u := range st.summarize() {
		got[u.key] += int(u.count())
		if u.minutesSum != u.count() {
			t.Errorf("%s: minutes sum %d, count %d", u.final.Event.Uid, u.minutesSum, u.count())
		}
	}
	if diff := cmp.Diff(occurrences, got, cmpOpts); diff != "" {
		t.Errorf("counts per key (-occurred +stored):\n%s", diff)
	}
}

func TestOutcomeAndReasonStrings(t *testing.T) {
	got := []string{Created.String(), SeriesStarted.String(), Counted.String(), Duplicate.String(), Outcome(0).String()}
	want := []string{"created", "started", "counted", "duplicate", "Outcome(0)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
	got = got[:0]
	for r := range NumReasons + 1 {
		got = append(got, r.String())
	}
	want = []string{"created", "started", "flush", "heartbeat", "finished", "evicted", "Reason(6)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
	w := Write{Seq: 3, Event: mkEvent("u1")}
	if got := w.ID(); got != "project/p1/u1/3" {
		t.Errorf("ID() = %q", got)
	}
}
