// Package k8sevent converts between eventgate events and Kubernetes Event
// objects of both APIs, core/v1 and events.k8s.io/v1: the Kubernetes Events
// API serves them and the webhooks read them.
package k8sevent

import (
	"maps"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// The apiVersions of the two Event APIs.
const (
	CoreV1   = "v1"
	EventsV1 = "events.k8s.io/v1"
)

// SeriesStateAnnotation carries eventgate's series state (Ongoing or
// Finished), which neither Kubernetes API has a field for any more.
const SeriesStateAnnotation = "eventgate.io/series-state"

func micro(ts *timestamppb.Timestamp) metav1.MicroTime {
	if ts == nil {
		return metav1.MicroTime{}
	}
	return metav1.NewMicroTime(ts.AsTime())
}

func secs(ts *timestamppb.Timestamp) metav1.Time {
	if ts == nil {
		return metav1.Time{}
	}
	return metav1.NewTime(ts.AsTime().Truncate(time.Second))
}

func pbTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// ObjectMeta is the metadata of ev as either API shows it; the series
// state rides in SeriesStateAnnotation.
func ObjectMeta(ev *eventgatev1.Event) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name:              ev.GetName(),
		Namespace:         ev.GetNamespace(),
		UID:               types.UID(ev.GetUid()),
		ResourceVersion:   ev.GetResourceVersion(),
		CreationTimestamp: secs(ev.GetEventTime()),
		Labels:            maps.Clone(ev.GetLabels()),
		Annotations:       maps.Clone(ev.GetAnnotations()),
	}
	if st := ev.GetSeries().GetState(); st != "" {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[SeriesStateAnnotation] = st
	}
	return m
}

func toRef(r *eventgatev1.ObjectReference) corev1.ObjectReference {
	if r == nil {
		return corev1.ObjectReference{}
	}
	return corev1.ObjectReference{
		APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName(),
		UID: types.UID(r.GetUid()), FieldPath: r.GetFieldPath(), ResourceVersion: r.GetResourceVersion(),
	}
}

// FromObjectReference converts a Kubernetes object reference.
func FromObjectReference(r *corev1.ObjectReference) *eventgatev1.ObjectReference {
	if r == nil {
		return nil
	}
	return &eventgatev1.ObjectReference{
		ApiVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name,
		Uid: string(r.UID), FieldPath: r.FieldPath, ResourceVersion: r.ResourceVersion,
	}
}

// ToEventsV1 renders a stored event as events.k8s.io/v1. A series of count 1
// (an update stored as its client counted it) is a singleton.
func ToEventsV1(ev *eventgatev1.Event) *eventsv1.Event {
	out := &eventsv1.Event{
		TypeMeta:            metav1.TypeMeta{Kind: "Event", APIVersion: EventsV1},
		ObjectMeta:          ObjectMeta(ev),
		EventTime:           micro(ev.GetEventTime()),
		ReportingController: ev.GetReportingController(),
		ReportingInstance:   ev.GetReportingInstance(),
		Action:              ev.GetAction(),
		Reason:              ev.GetReason(),
		Regarding:           toRef(ev.GetRegarding()),
		Note:                ev.GetNote(),
		Type:                ev.GetType(),
	}
	if ev.GetRelated() != nil {
		r := toRef(ev.GetRelated())
		out.Related = &r
	}
	if s := ev.GetSeries(); s != nil && s.GetCount() > 1 {
		out.Series = &eventsv1.EventSeries{Count: s.GetCount(), LastObservedTime: micro(s.GetLastObservedTime())}
	}
	return out
}

// ToCoreV1 renders a stored event as core/v1, as the KEP's backward
// compatibility table maps the fields: regarding is involvedObject, note is
// message, reportingController is source.component (and
// reportingComponent), reportingInstance is source.host; firstTimestamp is
// eventTime, lastTimestamp and count come from the series.
func ToCoreV1(ev *eventgatev1.Event) *corev1.Event {
	out := &corev1.Event{
		TypeMeta:            metav1.TypeMeta{Kind: "Event", APIVersion: CoreV1},
		ObjectMeta:          ObjectMeta(ev),
		InvolvedObject:      toRef(ev.GetRegarding()),
		Reason:              ev.GetReason(),
		Message:             ev.GetNote(),
		Source:              corev1.EventSource{Component: ev.GetReportingController(), Host: ev.GetReportingInstance()},
		FirstTimestamp:      secs(ev.GetEventTime()),
		LastTimestamp:       secs(ev.GetEventTime()),
		Count:               1,
		Type:                ev.GetType(),
		EventTime:           micro(ev.GetEventTime()),
		Action:              ev.GetAction(),
		ReportingController: ev.GetReportingController(),
		ReportingInstance:   ev.GetReportingInstance(),
	}
	if ev.GetRelated() != nil {
		r := toRef(ev.GetRelated())
		out.Related = &r
	}
	if s := ev.GetSeries(); s != nil && s.GetCount() > 1 {
		out.Count = s.GetCount()
		if s.GetLastObservedTime() != nil {
			out.LastTimestamp = secs(s.GetLastObservedTime())
		}
		out.Series = &corev1.EventSeries{Count: s.GetCount(), LastObservedTime: micro(s.GetLastObservedTime())}
	}
	return out
}

// metaToEvent copies what an ObjectMeta carries into ev. The series state
// annotation is eventgate's own and read back into the series.
func metaToEvent(m *metav1.ObjectMeta, ev *eventgatev1.Event) {
	ev.Name = m.Name
	ev.Namespace = m.Namespace
	ev.Uid = string(m.UID)
	ev.Labels = maps.Clone(m.Labels)
	ev.Annotations = maps.Clone(m.Annotations)
	if st, ok := ev.Annotations[SeriesStateAnnotation]; ok {
		delete(ev.Annotations, SeriesStateAnnotation)
		if ev.Series != nil {
			ev.Series.State = st
		}
	}
	if len(ev.Annotations) == 0 {
		ev.Annotations = nil
	}
	if len(ev.Labels) == 0 {
		ev.Labels = nil
	}
}

// FromEventsV1 converts an events.k8s.io/v1 Event (without a tenant). The deprecated core
// fields fill in what the new ones leave empty, and a deprecatedCount above
// 1 is a series, as a core/v1 count is.
func FromEventsV1(e *eventsv1.Event) *eventgatev1.Event {
	ev := &eventgatev1.Event{
		EventTime:           pbTime(e.EventTime.Time),
		ReportingController: firstNonEmpty(e.ReportingController, e.DeprecatedSource.Component),
		ReportingInstance:   firstNonEmpty(e.ReportingInstance, e.DeprecatedSource.Host),
		Action:              e.Action,
		Reason:              e.Reason,
		Regarding:           FromObjectReference(&e.Regarding),
		Related:             FromObjectReference(e.Related),
		Note:                e.Note,
		Type:                e.Type,
	}
	if ev.EventTime == nil {
		ev.EventTime = pbTime(e.DeprecatedFirstTimestamp.Time)
	}
	ev.Series = seriesFrom(e.Series.DeepCopy(), e.DeprecatedCount, e.DeprecatedLastTimestamp.Time)
	metaToEvent(&e.ObjectMeta, ev)
	return ev
}

// FromCoreV1 converts a core/v1 Event (the KEP's table, read backwards).
// count > 1 becomes a series; the later of series and lastTimestamp wins.
func FromCoreV1(e *corev1.Event) *eventgatev1.Event {
	ev := &eventgatev1.Event{
		EventTime:           pbTime(e.EventTime.Time),
		ReportingController: firstNonEmpty(e.ReportingController, e.Source.Component),
		ReportingInstance:   firstNonEmpty(e.ReportingInstance, e.Source.Host),
		Action:              e.Action,
		Reason:              e.Reason,
		Regarding:           FromObjectReference(&e.InvolvedObject),
		Related:             FromObjectReference(e.Related),
		Note:                e.Message,
		Type:                e.Type,
	}
	if ev.EventTime == nil {
		ev.EventTime = pbTime(e.FirstTimestamp.Time)
	}
	if ev.EventTime == nil {
		ev.EventTime = pbTime(e.LastTimestamp.Time)
	}
	var s *eventsv1.EventSeries
	if e.Series != nil {
		s = &eventsv1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
	}
	ev.Series = seriesFrom(s, e.Count, e.LastTimestamp.Time)
	metaToEvent(&e.ObjectMeta, ev)
	return ev
}

// seriesFrom merges a series with a core-style count and last timestamp:
// the higher count and the later time win.
func seriesFrom(s *eventsv1.EventSeries, count int32, last time.Time) *eventgatev1.EventSeries {
	if s == nil && count <= 1 {
		return nil
	}
	out := &eventgatev1.EventSeries{}
	if s != nil {
		out.Count = s.Count
		out.LastObservedTime = pbTime(s.LastObservedTime.Time)
	}
	if count > out.Count {
		out.Count = count
	}
	if !last.IsZero() && (out.LastObservedTime == nil || last.After(out.LastObservedTime.AsTime())) {
		out.LastObservedTime = pbTime(last)
	}
	return out
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
