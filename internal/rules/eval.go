package rules

import (
	"strconv"
	"strings"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/rules/rule"
)

// Notification states.
const (
	StateFiring   = "firing"
	StateRenotify = "renotify"
	StateResolved = "resolved"
)

// Series states as the intake writes them.
const seriesFinished = "Finished"

// maxSeriesTracked bounds the series a series rule remembers having fired
// for; the oldest are forgotten first (they finished long ago, or never
// will: a rule does not fire twice for one before it is forgotten).
const maxSeriesTracked = 10000

// ruleState is one rule's evaluation state, checkpointed with its shard.
// Every time in it is log time: the stream's timestamps, so that a replay
// after a takeover decides exactly what the first run decided.
type ruleState struct {
	UID  string `json:"uid"`
	Cond string `json:"cond"` // the condition it is the state of
	// Since: the rule evaluates the events stored at or after it, the
	// time its condition was stored (zero in checkpoints written before:
	// every event read after the shard took it in).
	Since time.Time `json:"since,omitzero"`
	// Seq: the rule has evaluated every event of its tenant up to it (set
	// when the shard rewinds for a rule it took in, so that the others
	// do not evaluate an event twice).
	Seq    uint64                 `json:"seq,omitempty"`
	Groups map[string]*groupState `json:"groups,omitempty"`
	// Series: series uid → when the rule fired for it.
	Series map[string]time.Time `json:"series,omitempty"`
}

// groupState is the state of one group of a rule.
type groupState struct {
	Values []string `json:"values"`
	// Times: the latest occurrences (at most the threshold), for count.
	Times []time.Time `json:"times,omitempty"`
	// Counts: series uid → the count last seen, to count occurrences that
	// a series update folds together.
	Counts   map[string]int32 `json:"counts,omitempty"`
	Firing   bool             `json:"firing,omitempty"`
	Trigger  string           `json:"trigger,omitempty"` // the episode's trigger id
	Notified time.Time        `json:"notified"`
	Repeats  int              `json:"repeats,omitempty"`
	LastSeen time.Time        `json:"lastSeen"`
	LastType string           `json:"lastType,omitempty"`
	// Last is the last matching event (protobuf), for absence and time
	// based resolves, which no event triggers.
	Last []byte `json:"last,omitempty"`
}

// Fired is what evaluation decided: a notification to make, about ev.
type Fired struct {
	ID    string
	State string
	Group map[string]string
	Count int
	Time  time.Time
	Event *eventgatev1.Event
}

func newRuleState(uid string) *ruleState {
	return &ruleState{UID: uid, Groups: map[string]*groupState{}, Series: map[string]time.Time{}}
}

// triggerID names an event as a trigger: its uid, and for a series the
// count it was at (a series keeps its uid as it counts).
func triggerID(ev *eventgatev1.Event) string {
	if s := ev.GetSeries(); s != nil {
		return ev.GetUid() + "#" + strconv.Itoa(int(s.GetCount()))
	}
	return ev.GetUid()
}

func notificationID(r *Rule, trigger, state string) string {
	return r.ID() + ":" + trigger + ":" + state
}

func group(r *Rule, st *ruleState, ev *eventgatev1.Event) (string, *groupState) {
	fields := r.Condition.Groups()
	vals := make([]string, len(fields))
	for i, f := range fields {
		vals[i] = rule.GroupValue(ev, f)
	}
	key := strings.Join(vals, "\x00")
	g := st.Groups[key]
	if g == nil {
		if len(st.Groups) >= MaxGroups {
			evictIdlest(st.Groups)
		}
		g = &groupState{Values: vals}
		st.Groups[key] = g
	}
	return key, g
}

// MaxGroups bounds the groups a rule keeps state for (its checkpoint's
// size): past it, the group seen least recently that does not fire is
// forgotten.
const MaxGroups = 1000

func evictIdlest(groups map[string]*groupState) {
	var victim string
	var at time.Time
	for k, g := range groups {
		if g.Firing {
			continue
		}
		if victim == "" || g.LastSeen.Before(at) {
			victim, at = k, g.LastSeen
		}
	}
	if victim == "" {
		for k := range groups { // every group fires: any one
			victim = k
			break
		}
	}
	delete(groups, victim)
}

func groupMap(r *Rule, g *groupState) map[string]string {
	fields := r.Condition.Groups()
	m := make(map[string]string, len(fields))
	for i, f := range fields {
		if i < len(g.Values) {
			m[f] = g.Values[i]
		}
	}
	return m
}

// occurrences is how many occurrences ev stands for in g: 1 for an event,
// the count's increase for a series update.
func occurrences(g *groupState, ev *eventgatev1.Event) int {
	s := ev.GetSeries()
	if s == nil {
		return 1
	}
	if g.Counts == nil {
		g.Counts = map[string]int32{}
	}
	prev := g.Counts[ev.GetUid()]
	if prev == 0 {
		prev = 1 // the series' first occurrence was an event of its own
	}
	g.Counts[ev.GetUid()] = s.GetCount()
	if len(g.Counts) > 64 {
		for k := range g.Counts { // any: a group rarely holds many series
			if k != ev.GetUid() {
				delete(g.Counts, k)
				break
			}
		}
	}
	return max(int(s.GetCount()-prev), 0)
}

// evaluate runs one event through the rule, at log time t. matched and
// resolves say whether ev passes the rule's filter and its resolve filter.
func evaluate(r *Rule, st *ruleState, ev *eventgatev1.Event, t time.Time, matched, resolves bool) []Fired {
	c := r.Condition
	var out []Fired
	switch c.Kind {
	case KindEvery:
		if matched {
			_, g := group(r, st, ev)
			out = append(out, Fired{ID: notificationID(r, triggerID(ev), StateFiring), State: StateFiring, Group: groupMap(r, g), Count: 1, Time: t, Event: ev})
			for k := range st.Groups { // no state to keep
				delete(st.Groups, k)
			}
		}
	case KindCount:
		_, g := group(r, st, ev)
		if resolves && g.Firing {
			out = append(out, resolve(r, g, t, ev)...)
			g.Times = g.Times[:0]
		}
		if matched {
			n := occurrences(g, ev)
			at := occurredAt(ev, t)
			for i := 0; i < min(n, c.Threshold); i++ {
				g.Times = insertSorted(g.Times, at)
			}
			if extra := len(g.Times) - c.Threshold; extra > 0 {
				g.Times = append(g.Times[:0], g.Times[extra:]...)
			}
			g.LastSeen = t
			g.Last = marshalEvent(ev)
			if burst(r, g) && !g.Firing {
				out = append(out, fire(r, g, t, ev, len(g.Times)))
			}
		}
	case KindSeries:
		s := ev.GetSeries()
		if !matched || s == nil {
			break
		}
		_, fired := st.Series[ev.GetUid()]
		switch {
		case !fired && int(s.GetCount()) >= c.Threshold && s.GetState() != seriesFinished:
			st.Series[ev.GetUid()] = t
			out = append(out, Fired{ID: notificationID(r, ev.GetUid()+"#series", StateFiring), State: StateFiring,
				Group: map[string]string{"series": ev.GetUid()}, Count: int(s.GetCount()), Time: t, Event: ev})
			if len(st.Series) > maxSeriesTracked {
				forgetOldest(st.Series)
			}
		case fired && s.GetState() == seriesFinished:
			delete(st.Series, ev.GetUid())
			if !r.SkipResolved {
				out = append(out, Fired{ID: notificationID(r, ev.GetUid()+"#series", StateResolved), State: StateResolved,
					Group: map[string]string{"series": ev.GetUid()}, Count: int(s.GetCount()), Time: t, Event: ev})
			}
		}
	case KindAbsence:
		if !matched {
			break
		}
		_, g := group(r, st, ev)
		if g.Firing {
			out = append(out, resolve(r, g, t, ev)...)
		}
		g.LastSeen, g.Last = t, marshalEvent(ev)
	case KindRecovery:
		if !matched {
			break
		}
		_, g := group(r, st, ev)
		if ev.GetType() == "Normal" && g.LastType == "Warning" {
			out = append(out, Fired{ID: notificationID(r, triggerID(ev), StateFiring), State: StateFiring, Group: groupMap(r, g), Count: 1, Time: t, Event: ev})
		}
		g.LastType, g.LastSeen = ev.GetType(), t
	}
	if matched || resolves {
		out = append(out, tick(r, st, t)...)
	}
	return out
}

// burst reports whether g's latest threshold occurrences happened within
// one window: the condition held when the last of them happened.
func burst(r *Rule, g *groupState) bool {
	n := r.Condition.Threshold
	return len(g.Times) >= n && g.Times[len(g.Times)-1].Sub(g.Times[len(g.Times)-n]) <= r.Condition.Window
}

// quiet reports whether a whole window has passed, at t, since g's last
// occurrence: a firing count resolves then. (Not as soon as the window
// holds fewer than the threshold: the intake writes a series' occurrences
// up to a flush interval late, and a steady crash loop would resolve and
// fire again between its writes.)
func quiet(r *Rule, g *groupState, t time.Time) bool {
	return len(g.Times) == 0 || !t.Before(g.Times[len(g.Times)-1].Add(r.Condition.Window))
}

func fire(r *Rule, g *groupState, t time.Time, ev *eventgatev1.Event, count int) Fired {
	g.Firing, g.Trigger, g.Notified, g.Repeats = true, triggerID(ev), t, 0
	return Fired{ID: notificationID(r, g.Trigger, StateFiring), State: StateFiring, Group: groupMap(r, g), Count: count, Time: t, Event: ev}
}

func resolve(r *Rule, g *groupState, t time.Time, ev *eventgatev1.Event) []Fired {
	trigger := g.Trigger
	g.Firing, g.Trigger, g.Repeats = false, "", 0
	if r.SkipResolved {
		return nil
	}
	return []Fired{{ID: notificationID(r, trigger, StateResolved), State: StateResolved, Group: groupMap(r, g), Time: t, Event: ev}}
}

// tick applies the passing of time up to t: count conditions that no
// longer hold resolve, absences fire, and what still holds is notified
// again at the renotify interval. It also forgets idle groups.
func tick(r *Rule, st *ruleState, t time.Time) []Fired {
	c := r.Condition
	var out []Fired
	for key, g := range st.Groups {
		switch c.Kind {
		case KindCount:
			if g.Firing && quiet(r, g, t) {
				out = append(out, resolve(r, g, t, unmarshalEvent(g.Last))...)
			}
			if !g.Firing && (len(g.Times) == 0 || g.Times[len(g.Times)-1].Before(t.Add(-c.Window))) {
				delete(st.Groups, key)
				continue
			}
		case KindAbsence:
			if !g.Firing && !g.LastSeen.IsZero() && !t.Before(g.LastSeen.Add(c.Window)) {
				ev := unmarshalEvent(g.Last)
				g.Firing, g.Trigger, g.Notified, g.Repeats = true, triggerID(ev)+"#absent", t, 0
				out = append(out, Fired{ID: notificationID(r, g.Trigger, StateFiring), State: StateFiring, Group: groupMap(r, g), Time: t, Event: ev})
			}
		case KindRecovery:
			if t.Sub(g.LastSeen) > 24*time.Hour {
				delete(st.Groups, key)
				continue
			}
		}
		if g.Firing && r.Renotify > 0 && !t.Before(g.Notified.Add(r.Renotify)) {
			g.Repeats++
			g.Notified = t
			out = append(out, Fired{ID: notificationID(r, g.Trigger, StateRenotify+strconv.Itoa(g.Repeats)), State: StateRenotify,
				Group: groupMap(r, g), Count: len(g.Times), Time: t, Event: unmarshalEvent(g.Last)})
		}
	}
	return out
}

func forgetOldest(m map[string]time.Time) {
	var oldest string
	var at time.Time
	for k, t := range m {
		if oldest == "" || t.Before(at) {
			oldest, at = k, t
		}
	}
	delete(m, oldest)
}

// maxSeriesLag bounds how far before its write a series update's last
// occurrence may be taken to have happened (the intake writes a series'
// count at most every flush interval, 30s by default).
const maxSeriesLag = 5 * time.Minute

// occurredAt is when the occurrences ev stands for happened, for a count's
// window: the log time t, or, for a series update, its last observed time
// when that is shortly before t (the intake folds occurrences and writes
// them later; their window is when they happened, not when written).
func occurredAt(ev *eventgatev1.Event, t time.Time) time.Time {
	lo := ev.GetSeries().GetLastObservedTime()
	if lo == nil || !lo.IsValid() {
		return t
	}
	at := lo.AsTime()
	if at.After(t) || t.Sub(at) > maxSeriesLag {
		return t
	}
	return at
}

// insertSorted adds at to the ascending times.
func insertSorted(times []time.Time, at time.Time) []time.Time {
	i := len(times)
	for i > 0 && times[i-1].After(at) {
		i--
	}
	times = append(times, time.Time{})
	copy(times[i+1:], times[i:])
	times[i] = at
	return times
}
