package k8sapi

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/selector"
)

// objectFields are the ObjectReference fields a selector may name.
var objectFields = []string{"apiVersion", "kind", "namespace", "name", "uid", "fieldPath", "resourceVersion"}

// selectableFields lists, per API, the field labels kube-apiserver accepts
// for events, then the ones the KEP promised and Kubernetes never shipped
// (reportingInstance, action, related.*).
func selectableFields(gv groupVersion) []string {
	obj := func(prefix string) []string {
		var out []string
		for _, f := range objectFields {
			out = append(out, prefix+"."+f)
		}
		return out
	}
	out := []string{"metadata.name", "metadata.namespace", "reason", "type"}
	if gv == coreV1 {
		out = append(out, obj("involvedObject")...)
		out = append(out, "reportingComponent", "source")
	} else {
		out = append(out, obj("regarding")...)
		out = append(out, "reportingController")
	}
	out = append(out, "reportingInstance", "action")
	return append(out, obj("related")...)
}

// fieldReq is one requirement of a field selector on the canonical
// (events.k8s.io) field name.
type fieldReq struct {
	field string // canonical: regarding.kind, reportingController, metadata.name, …
	op    selection.Operator
	value string
}

// canonicalField maps a field label of gv to its events.k8s.io spelling.
func canonicalField(gv groupVersion, f string) (string, bool) {
	if !slices.Contains(selectableFields(gv), f) {
		return "", false
	}
	switch {
	case strings.HasPrefix(f, "involvedObject."):
		return "regarding." + strings.TrimPrefix(f, "involvedObject."), true
	case f == "reportingComponent", f == "source":
		return "reportingController", true
	}
	return f, true
}

// parseFieldSelector parses a Kubernetes field selector (=, ==, !=).
func parseFieldSelector(gv groupVersion, raw string) ([]fieldReq, error) {
	if raw == "" {
		return nil, nil
	}
	sel, err := fields.ParseSelector(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid field selector: %w", err)
	}
	var out []fieldReq
	for _, r := range sel.Requirements() {
		c, ok := canonicalField(gv, r.Field)
		if !ok {
			return nil, fmt.Errorf("field label not supported: %s (selectable: %s)", r.Field, strings.Join(selectableFields(gv), ", "))
		}
		op := r.Operator
		if op == selection.DoubleEquals {
			op = selection.Equals
		}
		out = append(out, fieldReq{field: c, op: op, value: r.Value})
	}
	return out, nil
}

// pushable reports whether eventgate's Query filters on the requirement
// itself; the others are applied to what Query returns. eventgate's
// selector syntax trims spaces around a value, so such a value stays local.
func pushable(r fieldReq) bool {
	return r.field != "metadata.name" && !strings.HasSuffix(r.field, ".resourceVersion") &&
		strings.TrimSpace(r.value) == r.value
}

// queryFieldSelector renders the requirements Query can take in eventgate's
// selector syntax.
func queryFieldSelector(reqs []fieldReq) string {
	var parts []string
	for _, r := range reqs {
		if !pushable(r) {
			continue
		}
		key := r.field
		if key == "metadata.namespace" {
			key = "namespace"
		}
		op := "="
		if r.op == selection.NotEquals {
			op = "!="
		}
		parts = append(parts, key+op+selector.EscapeValue(r.value))
	}
	return strings.Join(parts, ",")
}

// fieldValue is the value of a canonical field of ev.
func fieldValue(ev *eventgatev1.Event, f string) string {
	ref := func(r *eventgatev1.ObjectReference, sub string) string {
		switch sub {
		case "apiVersion":
			return r.GetApiVersion()
		case "kind":
			return r.GetKind()
		case "namespace":
			return r.GetNamespace()
		case "name":
			return r.GetName()
		case "uid":
			return r.GetUid()
		case "fieldPath":
			return r.GetFieldPath()
		case "resourceVersion":
			return r.GetResourceVersion()
		}
		return ""
	}
	switch f {
	case "metadata.name":
		return ev.GetName()
	case "metadata.namespace":
		return ev.GetNamespace()
	case "reason":
		return ev.GetReason()
	case "type":
		return ev.GetType()
	case "reportingController":
		return ev.GetReportingController()
	case "reportingInstance":
		return ev.GetReportingInstance()
	case "action":
		return ev.GetAction()
	}
	if sub, ok := strings.CutPrefix(f, "regarding."); ok {
		return ref(ev.GetRegarding(), sub)
	}
	if sub, ok := strings.CutPrefix(f, "related."); ok {
		return ref(ev.GetRelated(), sub)
	}
	return ""
}

// filter decides locally what a watch streams and what a list keeps of
// what Query returned.
type filter struct {
	fields []fieldReq
	labels labels.Selector
}

func (f filter) matches(ev *eventgatev1.Event) bool {
	for _, r := range f.fields {
		eq := fieldValue(ev, r.field) == r.value
		if eq != (r.op == selection.Equals) {
			return false
		}
	}
	return f.labels == nil || f.labels.Empty() || f.labels.Matches(labels.Set(ev.GetLabels()))
}

// equals returns the values the selector requires field to equal.
func equals(reqs []fieldReq, field string) []string {
	var out []string
	for _, r := range reqs {
		if r.field == field && r.op == selection.Equals {
			out = append(out, r.value)
		}
	}
	return out
}
