// Package eventtable is kube-apiserver's table of events (what kubectl get
// events prints) for eventgate's events: the Kubernetes API serves it to
// kubectl, and the eventgate CLI prints the same. It depends on nothing of
// the server, so the CLI builds without it.
package eventtable

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Columns are kube-apiserver's columns for events; kubectl shows the
// priority 0 ones (LAST SEEN, TYPE, REASON, OBJECT, MESSAGE) and the rest
// with -o wide.
var Columns = []metav1.TableColumnDefinition{
	{Name: "Last Seen", Type: "string", Description: corev1.Event{}.SwaggerDoc()["lastTimestamp"]},
	{Name: "Type", Type: "string", Description: corev1.Event{}.SwaggerDoc()["type"]},
	{Name: "Reason", Type: "string", Description: corev1.Event{}.SwaggerDoc()["reason"]},
	{Name: "Object", Type: "string", Description: corev1.Event{}.SwaggerDoc()["involvedObject"]},
	{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.ObjectReference{}.SwaggerDoc()["fieldPath"]},
	{Name: "Source", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["source"]},
	{Name: "Message", Type: "string", Description: corev1.Event{}.SwaggerDoc()["message"]},
	{Name: "First Seen", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["firstTimestamp"]},
	{Name: "Count", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["count"]},
	{Name: "Name", Type: "string", Priority: 1, Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
}

func since(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

// Cells are an event's cells, one per column: kube-apiserver's printEvent
// on eventgate's event.
func Cells(ev *eventgatev1.Event, now time.Time) []any {
	first := ev.GetEventTime().AsTime()
	last := first
	count := int64(1)
	if s := ev.GetSeries(); s != nil && s.GetCount() > 1 {
		count = int64(s.GetCount())
		if s.GetLastObservedTime() != nil {
			last = s.GetLastObservedTime().AsTime()
		}
	}
	reg := ev.GetRegarding()
	target := strings.ToLower(reg.GetKind())
	if reg.GetName() != "" {
		target += "/" + reg.GetName()
	}
	source := ev.GetReportingController()
	if ev.GetReportingInstance() != "" {
		source += ", " + ev.GetReportingInstance()
	}
	return []any{
		since(last, now), ev.GetType(), ev.GetReason(), target, reg.GetFieldPath(), source,
		strings.TrimSpace(ev.GetNote()), since(first, now), count, ev.GetName(),
	}
}

// Table renders events as kubectl get events shows them, without row
// objects.
func Table(evs []*eventgatev1.Event, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: Columns, Rows: make([]metav1.TableRow, 0, len(evs))}
	for _, ev := range evs {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: Cells(ev, now)})
	}
	return t
}
