package k8sapi

import (
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

const tableContentType = "application/json;as=Table;v=v1;g=meta.k8s.io"

// asTable reports whether the client asked for a meta.k8s.io Table, as
// kubectl get does ("application/json;as=Table;v=v1;g=meta.k8s.io, …").
func asTable(r *http.Request) bool {
	for _, h := range r.Header.Values("Accept") {
		for _, part := range strings.Split(h, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != "application/json" {
				continue
			}
			if params["as"] == "Table" && params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
				return true
			}
		}
	}
	return false
}

// eventColumns are kube-apiserver's columns for events; kubectl shows the
// priority 0 ones (LAST SEEN, TYPE, REASON, OBJECT, MESSAGE) and the rest
// with -o wide.
var eventColumns = []metav1.TableColumnDefinition{
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

// eventRow is kube-apiserver's printEvent, on eventgate's event.
func eventRow(ev *eventgatev1.Event, now time.Time, include string, gvObj func(*eventgatev1.Event) any) metav1.TableRow {
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
	row := metav1.TableRow{Cells: []any{
		since(last, now), ev.GetType(), ev.GetReason(), target, reg.GetFieldPath(), source,
		strings.TrimSpace(ev.GetNote()), since(first, now), count, ev.GetName(),
	}}
	switch include {
	case "None":
	case "Object":
		row.Object = runtime.RawExtension{Object: objectOf(gvObj(ev))}
	default:
		row.Object = runtime.RawExtension{Object: &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
			ObjectMeta: objectMeta(ev),
		}}
	}
	return row
}

func objectOf(v any) runtime.Object {
	if o, ok := v.(runtime.Object); ok {
		return o
	}
	panic(fmt.Sprintf("k8sapi: %T is not a runtime.Object", v))
}

// newTable renders events as a Table; columns says whether to include the
// column definitions (a watch sends them with its first event only).
func newTable(r *http.Request, gv groupVersion, evs []*eventgatev1.Event, meta metav1.ListMeta, columns bool) *metav1.Table {
	t := &metav1.Table{
		TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"},
		ListMeta: meta,
		Rows:     []metav1.TableRow{},
	}
	if columns {
		t.ColumnDefinitions = eventColumns
	}
	include := r.URL.Query().Get("includeObject")
	now := time.Now()
	for _, ev := range evs {
		t.Rows = append(t.Rows, eventRow(ev, now, include, func(ev *eventgatev1.Event) any { return toObject(gv, ev) }))
	}
	return t
}

// Table renders events as kubectl get events shows them (the server-side
// Table kube-apiserver answers), for clients of eventgate's own API that
// print the same table: the eventgate CLI.
func Table(evs []*eventgatev1.Event, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: eventColumns, Rows: make([]metav1.TableRow, 0, len(evs))}
	for _, ev := range evs {
		t.Rows = append(t.Rows, eventRow(ev, now, "None", nil))
	}
	return t
}
