package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/selector"
)

// Store answers List and Get (internal/clickhouse implements it).
type Store interface {
	Query(ctx context.Context, q query.List, rv uint64) (query.Page, error)
	Get(ctx context.Context, scope query.Scope, g query.Lookup) (*eventgatev1.Event, error)
}

// Floor says up to which stream sequence ClickHouse holds every event.
type Floor interface {
	AckFloor(ctx context.Context) (uint64, error)
}

// Query implements EventService.Query.
func (s *Events) Query(ctx context.Context, req *eventgatev1.QueryRequest) (*eventgatev1.QueryResponse, error) {
	q, empty, err := queryFromRequest(req)
	if err != nil {
		return nil, toStatus(s.log, "Query", err)
	}
	if q.Scope, err = s.scope(ctx, authz.VerbQuery, q.Filter.Tenant); err != nil {
		return nil, toStatus(s.log, "Query", err)
	}
	ctx, lim, release, err := queryGuard(ctx, s.cfg.Limits, q.Scope)
	if err != nil {
		return nil, toStatus(s.log, "Query", err)
	}
	defer release()
	wrap, err := queryWindow(&q, lim, time.Now())
	if err != nil {
		return nil, toStatus(s.log, "Query", err)
	}
	var rv uint64
	if req.GetPageToken() == "" {
		if rv, err = s.floor.AckFloor(ctx); err != nil {
			return nil, toStatus(s.log, "Query", fmt.Errorf("%w: ingest position: %w", ErrUnavailable, err))
		}
	}
	if empty {
		return &eventgatev1.QueryResponse{ResourceVersion: strconv.FormatUint(rv, 10)}, nil
	}
	page, err := s.store.Query(ctx, q, rv)
	if err != nil {
		return nil, toStatus(s.log, "Query", err)
	}
	return &eventgatev1.QueryResponse{
		Events:          page.Events,
		ResourceVersion: strconv.FormatUint(page.ResourceVersion, 10),
		NextPageToken:   wrap(page.NextPageToken),
	}, nil
}

// Get implements EventService.Get.
func (s *Events) Get(ctx context.Context, req *eventgatev1.GetRequest) (*eventgatev1.GetResponse, error) {
	g := query.Lookup{UID: req.GetUid(), Namespace: req.GetNamespace(), Name: req.GetName()}
	if g.UID == "" && g.Name == "" {
		return nil, toStatus(s.log, "Get", invalid("uid", "uid, or namespace and name, is required"))
	}
	if t := req.GetTenant(); t != nil && (t.Type != "" || t.Name != "") {
		ref, err := tenantRef(t)
		if err != nil {
			return nil, toStatus(s.log, "Get", err)
		}
		g.Tenant = ref
	}
	scope, err := s.scope(ctx, authz.VerbQuery, g.Tenant)
	if errors.Is(err, authz.ErrPermissionDenied) {
		// Naming a tenant one may not read says nothing about its uids.
		return nil, toStatus(s.log, "Get", query.ErrNotFound)
	}
	if err != nil {
		return nil, toStatus(s.log, "Get", err)
	}
	ctx, _, release, err := queryGuard(ctx, s.cfg.Limits, scope)
	if err != nil {
		return nil, toStatus(s.log, "Get", err)
	}
	defer release()
	ev, err := s.store.Get(ctx, scope, g)
	if err != nil {
		return nil, toStatus(s.log, "Get", err)
	}
	return &eventgatev1.GetResponse{Event: ev}, nil
}

// scope is what the caller may read with verb, narrowed to the tenant the
// request names; the store ANDs it into every statement.
func (s *Events) scope(ctx context.Context, verb authz.Verb, narrow *query.TenantRef) (query.Scope, error) {
	p, err := principal(ctx)
	if err != nil {
		return query.Scope{}, err
	}
	var n *authz.Tenant
	if narrow != nil {
		n = &authz.Tenant{Type: narrow.Type, Name: narrow.Name}
		if n.Name == "*" {
			n.Name = "" // every tenant of the type
		}
	}
	sc, err := p.Scope(verb, n)
	if err != nil {
		return query.Scope{}, err
	}
	out := query.Scope{All: sc.All}
	for _, t := range sc.Tenants {
		ref := query.TenantRef{Type: t.Type, Name: t.Name}
		for _, k := range t.Kinds {
			ref.Kinds = append(ref.Kinds, query.GroupKind{Group: k.Group, Kind: k.Kind})
		}
		out.Tenants = append(out.Tenants, ref)
	}
	return out, nil
}

// tenantRef is the tenant a request names; Name "*" when it names a type
// only (every tenant of the type).
func tenantRef(t *eventgatev1.Tenant) (*query.TenantRef, error) {
	if vs := event.ValidateTenantSelector(t); len(vs) > 0 {
		return nil, tenantInvalid(vs)
	}
	ref := &query.TenantRef{Type: t.Type, Name: t.Name}
	if t.Type == event.TenantGlobal {
		ref.Name = ""
	} else if t.Name == "" {
		ref.Name = "*"
	}
	return ref, nil
}

// queryFromRequest builds the store query. empty reports a filter that can
// match nothing (e.g. reason=A in one place and reason=B in another).
func queryFromRequest(req *eventgatev1.QueryRequest) (q query.List, empty bool, err error) {
	f := &q.Filter
	if t := req.GetTenant(); t != nil && (t.Type != "" || t.Name != "") {
		if f.Tenant, err = tenantRef(t); err != nil {
			return q, false, err
		}
	}
	if err := valueFilters(f, req); err != nil {
		return q, false, err
	}
	if err := labelFilters(f, req.GetLabels()); err != nil {
		return q, false, err
	}
	noTime, err := timeFilters(f, req.GetSince(), req.GetUntil())
	if err != nil {
		return q, false, err
	}
	if empty, err = applyFieldSelector(f, req.GetFieldSelector()); err != nil {
		return q, false, err
	}
	reqs, err := selector.Parse(req.GetLabelSelector())
	if err != nil {
		return q, false, invalid("labelSelector", "%v", err)
	}
	for _, r := range reqs {
		f.Labels = append(f.Labels, query.LabelReq{Key: r.Key, Op: r.Op, Values: r.Values})
	}
	switch req.GetOrder() {
	case eventgatev1.Order_ORDER_OLDEST_FIRST:
		q.OldestFirst = true
	case eventgatev1.Order_ORDER_UNSPECIFIED, eventgatev1.Order_ORDER_NEWEST_FIRST:
	default:
		return q, false, invalid("order", "unknown order %d", req.GetOrder())
	}
	if ps := req.GetPageSize(); ps < 0 || ps > query.MaxPageSize {
		return q, false, invalid("pageSize", "must be between 1 and %d", query.MaxPageSize)
	}
	q.PageSize = int(req.GetPageSize())
	q.PageToken = req.GetPageToken()
	return q, empty || noTime, nil
}

// nonEmpty is the set of vs that are not "".
func nonEmpty(vs ...string) query.StringSet {
	var set query.StringSet
	for _, v := range vs {
		if v != "" {
			set.In = append(set.In, v)
		}
	}
	return set
}

// objectFilter is the filter of an object selector.
func objectFilter(o *eventgatev1.ObjectSelector) query.ObjectFilter {
	return query.ObjectFilter{
		APIVersion: nonEmpty(o.GetApiVersion()), Kind: nonEmpty(o.GetKind()), Namespace: nonEmpty(o.GetNamespace()),
		Name: nonEmpty(o.GetName()), UID: nonEmpty(o.GetUid()), FieldPath: nonEmpty(o.GetFieldPath()),
	}
}

// valueFilters sets f's filters on values: namespace, the fields that take
// sets of values, and the objects.
func valueFilters(f *query.Filter, req *eventgatev1.QueryRequest) error {
	// A field over the store's bound on the whole filter is named here;
	// the store refuses the rest (several fields together) as "query".
	var vs []event.Violation
	for _, set := range []struct {
		field string
		vals  []string
	}{
		{"type", req.GetType()}, {"reason", req.GetReason()}, {"action", req.GetAction()},
		{"reportingController", req.GetReportingController()}, {"reportingInstance", req.GetReportingInstance()},
	} {
		if len(set.vals) > query.MaxFilterValues {
			vs = append(vs, event.Violation{Field: set.field, Description: fmt.Sprintf("must have at most %d values, got %d", query.MaxFilterValues, len(set.vals))})
		}
	}
	if len(vs) > 0 {
		return &InvalidError{Violations: vs}
	}
	f.Namespace = nonEmpty(req.GetNamespace())
	f.Type = nonEmpty(req.GetType()...)
	f.Reason = nonEmpty(req.GetReason()...)
	f.Action = nonEmpty(req.GetAction()...)
	f.ReportingController = nonEmpty(req.GetReportingController()...)
	f.ReportingInstance = nonEmpty(req.GetReportingInstance()...)
	f.Regarding, f.Related = objectFilter(req.GetRegarding()), objectFilter(req.GetRelated())
	if inv := req.GetInvolving(); inv != nil {
		o := objectFilter(inv)
		f.Involving = &o
	}
	return nil
}

// labelFilters adds to f a requirement per entry of labels (key=value), in
// key order.
func labelFilters(f *query.Filter, labels map[string]string) error {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > query.MaxFilterValues/2 {
		return invalid("labels", "must have at most %d entries, got %d", query.MaxFilterValues/2, len(keys))
	}
	for _, k := range keys {
		if k == "" {
			return invalid("labels", "keys must not be empty")
		}
		f.Labels = append(f.Labels, query.LabelReq{Key: k, Op: "=", Values: []string{labels[k]}})
	}
	return nil
}

// timeFilters sets f's time range from since and until. noTime reports a
// range that leaves nothing.
//
// Bounds outside the times events may have (event.MinTime, MaxTime) are
// no bound, or leave nothing: ClickHouse's DateTime64 cannot hold them,
// and year 1 is Go's zero time, which the store reads as "no bound"
// (until=0001-01-01 matched every event).
func timeFilters(f *query.Filter, since, until *timestamppb.Timestamp) (noTime bool, err error) {
	if since != nil {
		if !since.IsValid() {
			return false, invalid("since", "is not a valid time")
		}
		switch t := since.AsTime(); {
		case !t.Before(event.MaxTime):
			noTime = true
		case !t.Before(event.MinTime):
			f.Since = t
		}
	}
	if until != nil {
		if !until.IsValid() {
			return false, invalid("until", "is not a valid time")
		}
		switch t := until.AsTime(); {
		case !t.After(event.MinTime):
			noTime = true
		case !t.After(event.MaxTime):
			f.Until = t
		}
	}
	if noTime && since != nil && until != nil && !since.AsTime().Before(until.AsTime()) {
		return false, invalid("until", "must be after since")
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return false, invalid("until", "must be after since")
	}
	return noTime, nil
}

// FieldSelectorKeys are the fields a field selector may name: every field the
// KEP asks to be selectable, with the core/v1 spellings as aliases.
var FieldSelectorKeys = []string{
	"type", "reason", "action", "reportingController", "reportingInstance", "namespace",
	"regarding.{apiVersion,kind,namespace,name,uid,fieldPath}", "related.{…}", "involving.{…}",
}

func applyFieldSelector(f *query.Filter, sel string) (empty bool, err error) {
	reqs, err := selector.Parse(sel)
	if err != nil {
		return false, invalid("fieldSelector", "%v", err)
	}
	for _, r := range reqs {
		set, err := fieldSet(f, r.Key)
		if err != nil {
			return false, err
		}
		switch r.Op {
		case selector.Equals, selector.In:
			if len(set.In) > 0 {
				set.In = intersect(set.In, r.Values)
				empty = empty || len(set.In) == 0
			} else {
				set.In = slices.Clone(r.Values)
			}
		case selector.NotEquals, selector.NotIn:
			set.NotIn = append(set.NotIn, r.Values...)
		default:
			return false, invalid("fieldSelector", "%q: fields support =, ==, !=, in and notin", r.Key)
		}
	}
	return empty, nil
}

func intersect(a, b []string) []string {
	var out []string
	for _, v := range a {
		if slices.Contains(b, v) {
			out = append(out, v)
		}
	}
	return out
}

// fieldSet returns the filter field a selector key names.
func fieldSet(f *query.Filter, key string) (*query.StringSet, error) {
	switch key {
	case "type":
		return &f.Type, nil
	case "reason":
		return &f.Reason, nil
	case "action":
		return &f.Action, nil
	case "reportingController", "reportingComponent", "source", "source.component":
		return &f.ReportingController, nil
	case "reportingInstance", "source.host":
		return &f.ReportingInstance, nil
	case "namespace", "metadata.namespace":
		return &f.Namespace, nil
	}
	prefix, field, ok := strings.Cut(key, ".")
	if ok {
		var o *query.ObjectFilter
		switch prefix {
		case "regarding", "involvedObject":
			o = &f.Regarding
		case "related":
			o = &f.Related
		case "involving":
			if f.Involving == nil {
				f.Involving = &query.ObjectFilter{}
			}
			o = f.Involving
		}
		if o != nil {
			switch field {
			case "apiVersion":
				return &o.APIVersion, nil
			case "kind":
				return &o.Kind, nil
			case "namespace":
				return &o.Namespace, nil
			case "name":
				return &o.Name, nil
			case "uid":
				return &o.UID, nil
			case "fieldPath":
				return &o.FieldPath, nil
			}
		}
	}
	return nil, invalid("fieldSelector", "unknown field %q; selectable: %s", key, strings.Join(FieldSelectorKeys, ", "))
}
