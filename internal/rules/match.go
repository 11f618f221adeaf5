package rules

import (
	"slices"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/subject"
)

// Matches reports whether ev passes f, in process, with the meaning the
// store gives f in SQL (a rule sees what Query would list). The filter's
// tenant and time bounds are not a rule's concern and are ignored.
func Matches(f *query.Filter, ev *eventgatev1.Event) bool {
	if !set(f.Namespace, ev.GetNamespace()) || !set(f.Type, ev.GetType()) || !set(f.Reason, ev.GetReason()) ||
		!set(f.Action, ev.GetAction()) || !set(f.ReportingController, ev.GetReportingController()) ||
		!set(f.ReportingInstance, ev.GetReportingInstance()) {
		return false
	}
	if !object(f.Regarding, ev.GetRegarding()) || !object(f.Related, ev.GetRelated()) {
		return false
	}
	if f.Involving != nil && !object(*f.Involving, ev.GetRegarding()) && !object(*f.Involving, ev.GetRelated()) {
		return false
	}
	labels := ev.GetLabels()
	for _, l := range f.Labels {
		v, ok := labels[l.Key]
		switch l.Op {
		case "=", "==":
			if !ok || v != l.Values[0] {
				return false
			}
		case "!=":
			if ok && v == l.Values[0] {
				return false
			}
		case "in":
			if !ok || !slices.Contains(l.Values, v) {
				return false
			}
		case "notin":
			if ok && slices.Contains(l.Values, v) {
				return false
			}
		case "exists":
			if !ok {
				return false
			}
		case "!":
			if ok {
				return false
			}
		}
	}
	return true
}

func set(s query.StringSet, v string) bool {
	if len(s.In) > 0 && !slices.Contains(s.In, v) {
		return false
	}
	return !slices.Contains(s.NotIn, v)
}

func object(o query.ObjectFilter, ref *eventgatev1.ObjectReference) bool {
	return set(o.APIVersion, ref.GetApiVersion()) && set(o.Kind, ref.GetKind()) && set(o.Namespace, ref.GetNamespace()) &&
		set(o.Name, ref.GetName()) && set(o.UID, ref.GetUid()) && set(o.FieldPath, ref.GetFieldPath())
}

// sees reports whether r may see ev at all: its tenant, and the kinds its
// author could watch.
func sees(r *Rule, ev *eventgatev1.Event) bool {
	t := ev.GetTenant()
	if t.GetType() != r.Tenant.Type || t.GetName() != r.Tenant.Name {
		return false
	}
	if len(r.Kinds) == 0 {
		return true
	}
	reg := ev.GetRegarding()
	gk := GroupKind{Group: subject.GroupFromAPIVersion(reg.GetApiVersion()), Kind: reg.GetKind()}
	return slices.Contains(r.Kinds, gk)
}
