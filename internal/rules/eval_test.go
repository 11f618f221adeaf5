package rules

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/rules/rule"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func podEvent(uid, typ, reason, pod string) *eventgatev1.Event {
	return &eventgatev1.Event{
		Uid: uid, Type: typ, Reason: reason, Namespace: "default",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "default", Name: pod},
		Tenant:    &eventgatev1.Tenant{Type: "project", Name: "p1"},
	}
}

// states lists the states of what fired, in order ("firing:e5").
func states(fs []Fired) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.State+":"+f.Event.GetUid())
	}
	return out
}

func backoffRule(resolve bool) *Rule {
	r := &Rule{UID: "u1", Name: "backoff", Tenant: Tenant{Type: "project", Name: "p1"},
		Filter:    query.Filter{Reason: query.StringSet{In: []string{"BackOff"}}},
		Condition: Condition{Kind: KindCount, Threshold: 5, Window: time.Minute}}
	if resolve {
		r.Resolve = &query.Filter{Reason: query.StringSet{In: []string{"Started"}}}
	}
	return r
}

// run feeds events at the given offsets (seconds) through r.
func run(r *Rule, st *ruleState, evs []*eventgatev1.Event, at []int) []Fired {
	var out []Fired
	for i, ev := range evs {
		out = append(out, evaluate(r, st, ev, t0.Add(time.Duration(at[i])*time.Second), Matches(&r.Filter, ev), r.Resolve != nil && Matches(r.Resolve, ev))...)
	}
	return out
}

func TestCountFiresOncePerGroupAndResolvesOnResolveEvent(t *testing.T) {
	r := backoffRule(true)
	st := newRuleState(r.UID)
	var evs []*eventgatev1.Event
	var at []int
	for i := 1; i <= 8; i++ { // 8 BackOff for pod a within 40s: fires at the 5th only
		evs = append(evs, podEvent(fmt.Sprintf("e%d", i), "Warning", "BackOff", "a"))
		at = append(at, i*5)
	}
	evs = append(evs, podEvent("other", "Warning", "BackOff", "b")) // another pod: its own group, 1 < 5
	at = append(at, 41)
	evs = append(evs, podEvent("s1", "Normal", "Started", "a"))
	at = append(at, 45)
	got := states(run(r, st, evs, at))
	if diff := cmp.Diff([]string{"firing:e5", "resolved:s1"}, got); diff != "" {
		t.Fatalf("notifications (-want +got):\n%s", diff)
	}
}

func TestCountResolvesAfterAQuietWindow(t *testing.T) {
	r := backoffRule(false)
	st := newRuleState(r.UID)
	var evs []*eventgatev1.Event
	var at []int
	for i := 1; i <= 5; i++ {
		evs = append(evs, podEvent(fmt.Sprintf("e%d", i), "Warning", "BackOff", "a"))
		at = append(at, i)
	}
	fired := run(r, st, evs, at)
	fired = append(fired, tick(r, st, t0.Add(30*time.Second))...) // e5 (at 5s) within a minute
	fired = append(fired, tick(r, st, t0.Add(64*time.Second))...) // still
	if len(fired) != 1 {
		t.Fatalf("resolved before a quiet minute: %v", states(fired))
	}
	fired = append(fired, tick(r, st, t0.Add(65*time.Second))...) // a minute without one: resolved
	fired = append(fired, tick(r, st, t0.Add(90*time.Second))...)
	if diff := cmp.Diff([]string{"firing:e5", "resolved:e5"}, states(fired)); diff != "" {
		t.Fatalf("notifications (-want +got):\n%s", diff)
	}
	if fired[0].ID != fired[1].ID[:len(fired[1].ID)-len("resolved")]+"firing" {
		t.Errorf("resolve id %q does not name the episode of %q", fired[1].ID, fired[0].ID)
	}
}

func TestCountCountsSeriesOccurrences(t *testing.T) {
	r := backoffRule(false)
	st := newRuleState(r.UID)
	first := podEvent("s", "Warning", "BackOff", "a")
	series := podEvent("s", "Warning", "BackOff", "a")
	series.Series = &eventgatev1.EventSeries{Count: 5, State: "Ongoing"}
	got := states(run(r, st, []*eventgatev1.Event{first, series}, []int{1, 2}))
	if diff := cmp.Diff([]string{"firing:s"}, got); diff != "" {
		t.Fatalf("a series counted to 5 is 5 occurrences (-want +got):\n%s", diff)
	}
}

func TestAbsenceFiresAfterSilenceAndResolvesOnHeartbeat(t *testing.T) {
	r := &Rule{UID: "u2", Name: "heartbeat", Tenant: Tenant{Type: "project", Name: "p1"},
		Filter:    query.Filter{Reason: query.StringSet{In: []string{"Heartbeat"}}},
		Condition: Condition{Kind: KindAbsence, Window: 30 * time.Second}}
	st := newRuleState(r.UID)
	fired := run(r, st, []*eventgatev1.Event{podEvent("h1", "Normal", "Heartbeat", "a"), podEvent("h2", "Normal", "Heartbeat", "a")}, []int{0, 10})
	fired = append(fired, tick(r, st, t0.Add(39*time.Second))...) // 29s of silence
	fired = append(fired, tick(r, st, t0.Add(40*time.Second))...) // 30s: fires
	fired = append(fired, tick(r, st, t0.Add(80*time.Second))...) // still silent: once
	fired = append(fired, run(r, st, []*eventgatev1.Event{podEvent("h3", "Normal", "Heartbeat", "a")}, []int{90})...)
	if diff := cmp.Diff([]string{"firing:h2", "resolved:h3"}, states(fired)); diff != "" {
		t.Fatalf("notifications (-want +got):\n%s", diff)
	}
}

func TestRecoveryFiresOnNormalAfterWarningOfTheSameObject(t *testing.T) {
	r := &Rule{UID: "u3", Name: "recovery", Tenant: Tenant{Type: "project", Name: "p1"},
		Condition: Condition{Kind: KindRecovery}}
	st := newRuleState(r.UID)
	got := states(run(r, st, []*eventgatev1.Event{
		podEvent("n0", "Normal", "Started", "a"),  // no warning before: nothing
		podEvent("w1", "Warning", "BackOff", "a"), // a warning
		podEvent("n1", "Normal", "Started", "b"),  // another object
		podEvent("n2", "Normal", "Started", "a"),  // recovery
		podEvent("n3", "Normal", "Started", "a"),  // still normal: nothing
	}, []int{1, 2, 3, 4, 5}))
	if diff := cmp.Diff([]string{"firing:n2"}, got); diff != "" {
		t.Fatalf("notifications (-want +got):\n%s", diff)
	}
}

func TestSeriesFiresAtThresholdAndResolvesWhenFinished(t *testing.T) {
	r := &Rule{UID: "u4", Name: "series", Tenant: Tenant{Type: "project", Name: "p1"},
		Condition: Condition{Kind: KindSeries, Threshold: 3}}
	st := newRuleState(r.UID)
	at := func(count int32, state string) *eventgatev1.Event {
		ev := podEvent("s", "Warning", "BackOff", "a")
		ev.Series = &eventgatev1.EventSeries{Count: count, State: state}
		return ev
	}
	fired := run(r, st, []*eventgatev1.Event{at(2, "Ongoing"), at(3, "Ongoing"), at(4, "Ongoing"), at(4, "Finished")}, []int{1, 2, 3, 4})
	var got []string
	for _, f := range fired {
		got = append(got, fmt.Sprintf("%s:%d", f.State, f.Count))
	}
	if diff := cmp.Diff([]string{"firing:3", "resolved:4"}, got); diff != "" {
		t.Fatalf("notifications (-want +got):\n%s", diff)
	}
}

func TestRenotifyWhileHolding(t *testing.T) {
	r := &Rule{UID: "u5", Name: "heartbeat", Tenant: Tenant{Type: "project", Name: "p1"},
		Condition: Condition{Kind: KindAbsence, Window: 10 * time.Second}, Renotify: time.Minute}
	st := newRuleState(r.UID)
	fired := run(r, st, []*eventgatev1.Event{podEvent("h1", "Normal", "Heartbeat", "a")}, []int{0})
	for s := 10; s <= 140; s += 10 {
		fired = append(fired, tick(r, st, t0.Add(time.Duration(s)*time.Second))...)
	}
	var got []string
	for _, f := range fired {
		got = append(got, f.State)
	}
	if diff := cmp.Diff([]string{StateFiring, StateRenotify, StateRenotify}, got); diff != "" {
		t.Fatalf("notifications (-want +got):\n%s", diff)
	}
	if fired[1].ID == fired[2].ID {
		t.Errorf("two renotifications share the id %q", fired[1].ID)
	}
}

func TestEveryUsesEventUIDAndRuleAsID(t *testing.T) {
	r := &Rule{UID: "u6", Name: "all", Tenant: Tenant{Type: "project", Name: "p1"}, Condition: Condition{Kind: KindEvery}}
	st := newRuleState(r.UID)
	fired := run(r, st, []*eventgatev1.Event{podEvent("e1", "Normal", "Started", "a")}, []int{0})
	if len(fired) != 1 || fired[0].ID != "project/p1/all:e1:firing" {
		t.Fatalf("fired %+v, want one notification with id project/p1/all:e1:firing", fired)
	}
}

func TestGroupsAreBoundedAndFiringGroupsKept(t *testing.T) {
	r := &Rule{UID: "u7", Name: "absence", Tenant: Tenant{Type: "project", Name: "p1"},
		Condition: Condition{Kind: KindAbsence, Window: time.Minute}}
	st := newRuleState(r.UID)
	fired := run(r, st, []*eventgatev1.Event{podEvent("first", "Normal", "Heartbeat", "first")}, []int{0})
	fired = append(fired, tick(r, st, t0.Add(61*time.Second))...) // the first group fires
	for i := 0; i < MaxGroups+10; i++ {
		ev := podEvent(fmt.Sprint(i), "Normal", "Heartbeat", fmt.Sprintf("pod-%d", i))
		fired = append(fired, evaluate(r, st, ev, t0.Add(61*time.Second+time.Duration(i)*time.Millisecond), true, false)...)
	}
	if len(st.Groups) != MaxGroups {
		t.Errorf("%d groups kept, want %d", len(st.Groups), MaxGroups)
	}
	if g := st.Groups["v1/Pod/default/first"]; g == nil || !g.Firing {
		t.Errorf("the firing group was evicted: %+v", g)
	}
	if diff := cmp.Diff([]string{"firing:first"}, states(fired)); diff != "" {
		t.Errorf("notifications (-want +got):\n%s", diff)
	}
}

func TestCheckpointRoundTripKeepsStateUsable(t *testing.T) {
	r := backoffRule(false)
	st := newRuleState(r.UID)
	in := checkpointData{Seq: 7, Rules: map[string]*ruleState{r.UID: st}}
	b, err := encodeCheckpoint(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out checkpointData
	if err := decodeCheckpoint(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Seq != 7 || out.Rules[r.UID] == nil {
		t.Fatalf("decoded %+v", out)
	}
	// A restored rule goes on counting (its empty maps were left out).
	fired := run(r, out.Rules[r.UID], []*eventgatev1.Event{podEvent("e1", "Warning", "BackOff", "a")}, []int{0})
	if len(fired) != 0 || len(out.Rules[r.UID].Groups) != 1 {
		t.Errorf("after restore: fired %v, groups %d", states(fired), len(out.Rules[r.UID].Groups))
	}
}

func TestCountWindowUsesWhenSeriesOccurrencesHappened(t *testing.T) {
	r := backoffRule(false)
	st := newRuleState(r.UID)
	first := podEvent("s", "Warning", "BackOff", "a")
	// Written at 90s, the series' 5th occurrence happened at 55s: the five
	// fall within a minute of the first (at 0s).
	series := podEvent("s", "Warning", "BackOff", "a")
	series.Series = &eventgatev1.EventSeries{Count: 5, State: "Ongoing", LastObservedTime: timestamppb.New(t0.Add(55 * time.Second))}
	fired := run(r, st, []*eventgatev1.Event{first}, []int{0})
	fired = append(fired, evaluate(r, st, series, t0.Add(90*time.Second), true, false)...)
	if diff := cmp.Diff([]string{"firing:s"}, states(fired)); diff != "" {
		t.Fatalf("notifications (-want +got):\n%s", diff)
	}
}

func TestTemplatesCannotAllocateWithoutBound(t *testing.T) {
	r := &Rule{UID: "u8", Name: "t", Tenant: Tenant{Type: "project", Name: "p1"}, Condition: Condition{Kind: KindEvery}}
	f := Fired{ID: "x", State: StateFiring, Event: podEvent("e1", "Normal", "Started", "a")}
	for _, text := range []string{`{{printf "%999999999d" 1}}`, `{{printf "%*d" 999999999 1}}`, `{{range $i, $c := .Event.Note}}{{$.Event}}{{end}}{{range .Event.Note}}{{end}}` + strings.Repeat("{{.Event}}", 200)} {
		tmpl, err := rule.CompileTemplate(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		n := notification(r, f, tmpl)
		if len(n.Message) > MaxMessage || !strings.Contains(n.Message, "template failed") {
			t.Errorf("%s: message of %d bytes: %.100s", text, len(n.Message), n.Message)
		}
	}
	tmpl, _ := rule.CompileTemplate(`{{printf "%-10s|" .Event.Reason}}`)
	if n := notification(r, f, tmpl); n.Message != "Started   |" {
		t.Errorf("a modest printf: %q", n.Message)
	}
}
