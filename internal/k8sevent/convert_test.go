package k8sevent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

func stored() *eventgatev1.Event {
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 123456000, time.UTC)
	return &eventgatev1.Event{
		Uid: "u1", Name: "api-0.1", Namespace: "web", ResourceVersion: "42",
		EventTime:           timestamppb.New(t0),
		Series:              &eventgatev1.EventSeries{Count: 3, LastObservedTime: timestamppb.New(t0.Add(time.Minute)), State: "Ongoing"},
		ReportingController: "example.com/ctl", ReportingInstance: "ctl-1", Action: "Sync", Reason: "BackOff",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "api-0", Uid: "p1", FieldPath: "spec.containers{app}"},
		Related:   &eventgatev1.ObjectReference{Kind: "Node", Name: "n1"},
		Note:      "back-off", Type: "Warning",
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"},
	}
}

// TestRoundTrip: an event read through either API and written back is the
// same event.
func TestRoundTrip(t *testing.T) {
	want := stored()
	want.ResourceVersion = ""
	for name, back := range map[string]*eventgatev1.Event{
		"events.k8s.io/v1": FromEventsV1(ToEventsV1(stored())),
		"core/v1":          FromCoreV1(ToCoreV1(stored())),
	} {
		if d := cmp.Diff(want, back, protocmp.Transform()); d != "" {
			t.Errorf("%s round trip (-want +got):\n%s", name, d)
		}
	}
}

// TestCoreMapping checks the KEP's backward-compatibility table.
func TestCoreMapping(t *testing.T) {
	c := ToCoreV1(stored())
	if c.InvolvedObject.Name != "api-0" || c.Message != "back-off" || c.Source.Component != "example.com/ctl" ||
		c.Source.Host != "ctl-1" || c.ReportingController != "example.com/ctl" || c.Count != 3 ||
		!c.LastTimestamp.Time.Equal(time.Date(2026, 11, 20, 10, 1, 0, 0, time.UTC)) ||
		!c.FirstTimestamp.Time.Equal(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("core/v1 rendering: %+v", c)
	}
	// An old-style core/v1 event: source only, count > 1, no eventTime.
	first := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	last := metav1.NewTime(first.Add(time.Hour))
	ev := FromCoreV1(&corev1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n"},
		Source:         corev1.EventSource{Component: "kubelet", Host: "node-1"},
		Count:          7, FirstTimestamp: first, LastTimestamp: last, Reason: "R", Message: "m",
	})
	if ev.ReportingController != "kubelet" || ev.ReportingInstance != "node-1" || ev.Series.GetCount() != 7 ||
		!ev.Series.GetLastObservedTime().AsTime().Equal(last.Time) || !ev.EventTime.AsTime().Equal(first.Time) || ev.Note != "m" {
		t.Errorf("core/v1 event converted to %v", ev)
	}
	// count 1 is a singleton.
	if ev := FromCoreV1(&corev1.Event{Count: 1}); ev.Series != nil {
		t.Errorf("count 1 became series %v", ev.Series)
	}
	// A series of count 1 (stored as counted) renders as a singleton.
	s := stored()
	s.Series.Count = 1
	if e := ToEventsV1(s); e.Series != nil {
		t.Errorf("count-1 series rendered as %+v", e.Series)
	}
}
