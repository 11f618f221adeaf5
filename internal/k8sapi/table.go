package k8sapi

import (
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/k8sapi/eventtable"
	"github.com/eventgate/eventgate/internal/k8sevent"
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

// eventRow is kube-apiserver's printEvent row, with the object kubectl
// asked to include.
func eventRow(ev *eventgatev1.Event, now time.Time, include string, gvObj func(*eventgatev1.Event) any) metav1.TableRow {
	row := metav1.TableRow{Cells: eventtable.Cells(ev, now)}
	switch include {
	case "None":
	case "Object":
		row.Object = runtime.RawExtension{Object: objectOf(gvObj(ev))}
	default:
		row.Object = runtime.RawExtension{Object: &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
			ObjectMeta: k8sevent.ObjectMeta(ev),
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
		t.ColumnDefinitions = eventtable.Columns
	}
	include := r.URL.Query().Get("includeObject")
	now := time.Now()
	for _, ev := range evs {
		t.Rows = append(t.Rows, eventRow(ev, now, include, func(ev *eventgatev1.Event) any { return toObject(gv, ev) }))
	}
	return t
}
