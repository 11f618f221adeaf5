package clickhouse

import (
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/query"
)

// The SQL of a query.Scope and a query.Filter: predicates over the columns
// the events table and the analytics tables share (analyticsFilterColumns).

// regardingGroupSQL is the API group of the regarding object: the part of
// its apiVersion before the last '/', "" (core) without one.
const regardingGroupSQL = "if(position(regarding_api_version, '/') = 0, '', replaceRegexpOne(regarding_api_version, '/[^/]*$', ''))"

// where collects ANDed predicates.
type where struct{ preds []string }

func (w *where) add(p string) {
	if p != "" {
		w.preds = append(w.preds, p)
	}
}

func (w *where) String() string {
	if len(w.preds) == 0 {
		return "1"
	}
	return "(" + strings.Join(w.preds, ") AND (") + ")"
}

func tenantSQL(p *paramSet, t query.TenantRef) string {
	if t.Name == "*" {
		return "tenant_type = " + p.str(t.Type)
	}
	return "tenant_type = " + p.str(t.Type) + " AND tenant_name = " + p.str(t.Name)
}

// scopeSQL is the scope predicate; "" for All.
func scopeSQL(p *paramSet, sc query.Scope) string {
	if sc.All {
		return ""
	}
	if len(sc.Tenants) == 0 {
		return "0"
	}
	ors := make([]string, len(sc.Tenants))
	for i, t := range sc.Tenants {
		pred := tenantSQL(p, t)
		if len(t.Kinds) > 0 {
			kinds := make([]string, len(t.Kinds))
			for j, k := range t.Kinds {
				kinds[j] = "(regarding_kind = " + p.str(k.Kind) + " AND " + regardingGroupSQL + " = " + p.str(k.Group) + ")"
			}
			pred += " AND (" + strings.Join(kinds, " OR ") + ")"
		}
		ors[i] = "(" + pred + ")"
	}
	return strings.Join(ors, " OR ")
}

// setSQL renders a StringSet on col; "" when it constrains nothing.
func setSQL(p *paramSet, col string, s query.StringSet) string {
	var parts []string
	switch len(s.In) {
	case 0:
	case 1:
		parts = append(parts, col+" = "+p.str(s.In[0]))
	default:
		parts = append(parts, col+" IN ("+list(p, s.In)+")")
	}
	switch len(s.NotIn) {
	case 0:
	case 1:
		parts = append(parts, col+" != "+p.str(s.NotIn[0]))
	default:
		parts = append(parts, col+" NOT IN ("+list(p, s.NotIn)+")")
	}
	return strings.Join(parts, " AND ")
}

func list(p *paramSet, vs []string) string {
	ph := make([]string, len(vs))
	for i, v := range vs {
		ph[i] = p.str(v)
	}
	return strings.Join(ph, ", ")
}

func objectSQL(p *paramSet, prefix string, o query.ObjectFilter) string {
	var w where
	w.add(setSQL(p, prefix+"api_version", o.APIVersion))
	w.add(setSQL(p, prefix+"kind", o.Kind))
	w.add(setSQL(p, prefix+"namespace", o.Namespace))
	w.add(setSQL(p, prefix+"name", o.Name))
	w.add(setSQL(p, prefix+"uid", o.UID))
	w.add(setSQL(p, prefix+"field_path", o.FieldPath))
	if len(w.preds) == 0 {
		return ""
	}
	return w.String()
}

func filterSQL(p *paramSet, w *where, f query.Filter) {
	if f.Tenant != nil {
		w.add(tenantSQL(p, *f.Tenant))
	}
	w.add(setSQL(p, "namespace", f.Namespace))
	w.add(setSQL(p, "type", f.Type))
	w.add(setSQL(p, "reason", f.Reason))
	w.add(setSQL(p, "action", f.Action))
	w.add(setSQL(p, "reporting_controller", f.ReportingController))
	w.add(setSQL(p, "reporting_instance", f.ReportingInstance))
	w.add(objectSQL(p, "regarding_", f.Regarding))
	w.add(objectSQL(p, "related_", f.Related))
	if f.Involving != nil {
		reg := objectSQL(p, "regarding_", *f.Involving)
		rel := objectSQL(p, "related_", *f.Involving)
		if reg == "" {
			reg = "1"
		}
		// An event without a related object is not involved through it.
		rel = "(related_kind != '' OR related_name != '' OR related_uid != '')" + and(rel)
		w.add("(" + reg + ") OR (" + rel + ")")
	}
	for _, l := range f.Labels {
		w.add(labelSQL(p, l))
	}
	if !f.Since.IsZero() {
		w.add("event_time >= " + p.micros(ceilMicros(f.Since)))
	}
	if !f.Until.IsZero() {
		w.add("event_time < " + p.micros(ceilMicros(f.Until)))
	}
}

func and(s string) string {
	if s == "" {
		return ""
	}
	return " AND " + s
}

func labelSQL(p *paramSet, l query.LabelReq) string {
	k := p.str(l.Key)
	has := "mapContains(labels, " + k + ")"
	val := "labels[" + k + "]"
	switch l.Op {
	case "=", "==":
		return has + " AND " + val + " = " + p.str(l.Values[0])
	case "!=":
		return "NOT (" + has + " AND " + val + " = " + p.str(l.Values[0]) + ")"
	case "in":
		return has + " AND " + val + " IN (" + list(p, l.Values) + ")"
	case "notin":
		return "NOT (" + has + " AND " + val + " IN (" + list(p, l.Values) + "))"
	case "exists":
		return has
	case "!":
		return "NOT " + has
	}
	panic("unreachable: label op validated")
}

// ceilMicros is query.CeilMicros clamped to DateTime64's range.
func ceilMicros(t time.Time) int64 {
	if t.Before(minTime) {
		t = minTime
	} else if t.After(maxTime) {
		t = maxTime.Add(time.Microsecond)
	}
	return query.CeilMicros(t)
}
