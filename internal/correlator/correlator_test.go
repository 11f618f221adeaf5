package correlator

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

var t0 = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

func podEvent(note string) *eventgatev1.Event {
	return &eventgatev1.Event{
		Uid:                 "caller-uid",
		Name:                "api-0.abc",
		Namespace:           "web",
		Tenant:              &eventgatev1.Tenant{Type: "project", Name: "shop"},
		ReportingController: "kubelet",
		ReportingInstance:   "node-1",
		Action:              "Pulling",
		Reason:              "BackOff",
		Type:                "Warning",
		Note:                note,
		Regarding:           &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "api-0", Uid: "pod-uid", FieldPath: "spec.containers{app}"},
		Related:             &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Node", Name: "node-1"},
		Labels:              map[string]string{"l": "v"},
		Annotations:         map[string]string{"a": "v"},
		Metadata:            map[string]string{"m": "v"},
		EventTime:           timestamppb.New(t0),
	}
}

// TestThreshold: the first nine distinct messages pass unchanged, the tenth
// and every further distinct one become aggregates, as client-go's
// EventAggregator does with its defaults.
func TestThreshold(t *testing.T) {
	c := New(DefaultConfig())
	for i := range 9 {
		ev := podEvent(fmt.Sprintf("back-off %d", i))
		if got := c.Correlate(ev, t0.Add(time.Duration(i)*time.Second)); got != ev {
			t.Fatalf("event %d: got a new event %v, want the input", i, got)
		}
	}
	now := t0.Add(9 * time.Second)
	got := c.Correlate(podEvent("back-off 9"), now)
	want := &eventgatev1.Event{
		Namespace:           "web",
		Tenant:              &eventgatev1.Tenant{Type: "project", Name: "shop"},
		ReportingController: "kubelet",
		ReportingInstance:   "node-1",
		Reason:              "BackOff",
		Type:                "Warning",
		Note:                "(combined from similar events): back-off 9",
		Regarding:           &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "api-0", Uid: "pod-uid", FieldPath: "spec.containers{app}"},
		EventTime:           timestamppb.New(now),
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Fatalf("aggregate (-want +got):\n%s", d)
	}
	// Over the threshold, further distinct messages stay aggregated.
	for i := 10; i < 20; i++ {
		got := c.Correlate(podEvent(fmt.Sprintf("back-off %d", i)), now.Add(time.Duration(i)*time.Second))
		if !strings.HasPrefix(got.GetNote(), CombinedPrefix) {
			t.Fatalf("event %d: note %q, want an aggregate", i, got.GetNote())
		}
	}
}

// TestIdenticalMessagesDoNotCount: repeats of one message are the
// EventLogger's business (a series on the server), not similar events.
func TestIdenticalMessagesDoNotCount(t *testing.T) {
	c := New(DefaultConfig())
	for i := range 100 {
		ev := podEvent("same")
		if got := c.Correlate(ev, t0.Add(time.Duration(i)*time.Second)); got != ev {
			t.Fatalf("repeat %d was aggregated", i)
		}
	}
}

func TestInputNotModified(t *testing.T) {
	c := New(Config{MaxEvents: 2})
	in := podEvent("a")
	c.Correlate(in, t0)
	in2 := podEvent("b")
	before := podEvent("b")
	if got := c.Correlate(in2, t0); got == in2 {
		t.Fatal("second distinct message with MaxEvents 2 was not aggregated")
	}
	if d := cmp.Diff(before, in2, protocmp.Transform()); d != "" {
		t.Fatalf("input modified (-before +after):\n%s", d)
	}
}

// TestInterval: a gap longer than MaxInterval since the last similar event
// starts the group over; gaps within it (even spanning more than the interval
// in total) keep it going, as client-go measures from the last event.
func TestInterval(t *testing.T) {
	c := New(Config{MaxEvents: 3, MaxInterval: 10 * time.Minute})
	now := t0
	step := func(note string, gap time.Duration) bool {
		now = now.Add(gap)
		ev := podEvent(note)
		return c.Correlate(ev, now) != ev
	}
	if step("a", 0) || step("b", 9*time.Minute) {
		t.Fatal("aggregated below the threshold")
	}
	if !step("c", 9*time.Minute) {
		t.Fatal("third distinct message within the interval of the last one was not aggregated")
	}
	// Idle for longer than the interval: the group starts over.
	if step("d", 10*time.Minute+time.Second) || step("e", time.Second) {
		t.Fatal("aggregated after the group expired")
	}
	if !step("f", time.Second) {
		t.Fatal("third distinct message of the new group was not aggregated")
	}
	// Exactly the interval is still within it.
	if !step("g", 10*time.Minute) {
		t.Fatal("a gap of exactly MaxInterval reset the group")
	}
}

// TestGroups: events differing in any key field are not similar; fields
// outside the key (action, related, fieldPath, note, labels…) do not split
// a group.
func TestGroups(t *testing.T) {
	mutations := map[string]func(*eventgatev1.Event){
		"tenant type":         func(e *eventgatev1.Event) { e.Tenant.Type = "organization" },
		"tenant name":         func(e *eventgatev1.Event) { e.Tenant.Name = "blog" },
		"reportingController": func(e *eventgatev1.Event) { e.ReportingController = "other" },
		"reportingInstance":   func(e *eventgatev1.Event) { e.ReportingInstance = "node-2" },
		"kind":                func(e *eventgatev1.Event) { e.Regarding.Kind = "Node" },
		"namespace":           func(e *eventgatev1.Event) { e.Regarding.Namespace = "other" },
		"name":                func(e *eventgatev1.Event) { e.Regarding.Name = "api-1" },
		"uid":                 func(e *eventgatev1.Event) { e.Regarding.Uid = "other" },
		"apiVersion":          func(e *eventgatev1.Event) { e.Regarding.ApiVersion = "v2" },
		"type":                func(e *eventgatev1.Event) { e.Type = "Normal" },
		"reason":              func(e *eventgatev1.Event) { e.Reason = "Failed" },
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			c := New(Config{MaxEvents: 2})
			c.Correlate(podEvent("a"), t0)
			ev := podEvent("b")
			mutate(ev)
			if got := c.Correlate(ev, t0); got != ev {
				t.Fatalf("an event differing in %s was grouped with the first", name)
			}
		})
	}
	same := map[string]func(*eventgatev1.Event){
		"action":      func(e *eventgatev1.Event) { e.Action = "Other" },
		"related":     func(e *eventgatev1.Event) { e.Related = nil },
		"fieldPath":   func(e *eventgatev1.Event) { e.Regarding.FieldPath = "" },
		"labels":      func(e *eventgatev1.Event) { e.Labels = nil },
		"uid (event)": func(e *eventgatev1.Event) { e.Uid = "x" },
	}
	for name, mutate := range same {
		t.Run("same/"+name, func(t *testing.T) {
			c := New(Config{MaxEvents: 2})
			c.Correlate(podEvent("a"), t0)
			ev := podEvent("b")
			mutate(ev)
			if got := c.Correlate(ev, t0); got == ev {
				t.Fatalf("an event differing only in %s was not grouped", name)
			}
		})
	}
}

// TestKeyUnambiguous: moving bytes between fields gives another key.
func TestKeyUnambiguous(t *testing.T) {
	a := podEvent("")
	a.Regarding.Namespace, a.Regarding.Name = "ab", "c"
	b := podEvent("")
	b.Regarding.Namespace, b.Regarding.Name = "a", "bc"
	if Key(a) == Key(b) {
		t.Fatal("keys of different events collide")
	}
}

func TestCacheBounded(t *testing.T) {
	c := New(Config{MaxEvents: 2, CacheSize: 8})
	for i := range 100 {
		ev := podEvent("a")
		ev.Regarding.Name = fmt.Sprint("pod-", i)
		c.Correlate(ev, t0)
	}
	if n := c.Len(); n != 8 {
		t.Fatalf("remembers %d groups, want 8", n)
	}
	// The most recent group is still remembered, the oldest is not.
	recent := podEvent("b")
	recent.Regarding.Name = "pod-99"
	if c.Correlate(recent, t0) == recent {
		t.Fatal("the most recent group was evicted")
	}
	old := podEvent("b")
	old.Regarding.Name = "pod-0"
	if c.Correlate(old, t0) != old {
		t.Fatal("the oldest group was not evicted")
	}
}

func TestNoteBounded(t *testing.T) {
	c := New(Config{MaxEvents: 1, MaxNoteBytes: 40})
	got := c.Correlate(podEvent(strings.Repeat("é", 30)), t0)
	if len(got.Note) > 40 || !utf8.ValidString(got.Note) || !strings.HasPrefix(got.Note, CombinedPrefix) {
		t.Fatalf("note %q (%d bytes): want a valid prefixed note of at most 40 bytes", got.Note, len(got.Note))
	}
	if c.Correlate(nil, t0) != nil {
		t.Fatal("nil event did not stay nil")
	}
}

func TestConcurrent(t *testing.T) {
	c := New(Config{MaxEvents: 5, CacheSize: 16})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				ev := podEvent(fmt.Sprint(i))
				ev.Regarding.Name = fmt.Sprint("pod-", (g*500+i)%32)
				c.Correlate(ev, t0.Add(time.Duration(i)*time.Millisecond))
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n > 16 {
		t.Fatalf("remembers %d groups, more than the cache size", n)
	}
}

func BenchmarkCorrelate(b *testing.B) {
	c := New(DefaultConfig())
	evs := make([]*eventgatev1.Event, 64)
	for i := range evs {
		evs[i] = podEvent(fmt.Sprint("message ", i%16))
		evs[i].Regarding.Name = fmt.Sprint("pod-", i%4)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Correlate(evs[i%len(evs)], t0)
	}
}
