package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/query"
)

// AnalyticsStore answers the analytics questions (internal/clickhouse
// implements it; Query
// serves Timeline).
type AnalyticsStore interface {
	Histogram(ctx context.Context, q query.HistogramRequest) (query.Histogram, error)
	Top(ctx context.Context, q query.TopRequest) (query.Top, error)
	Facets(ctx context.Context, q query.FacetsRequest) (query.Facets, error)
	Series(ctx context.Context, q query.SeriesRequest) (query.SeriesList, error)
	Query(ctx context.Context, q query.List, rv uint64) (query.Page, error)
}

// Analytics implements eventgate.v1.AnalyticsService. Every request takes
// the filter of Query (EventFilter's fields) and is scoped with
// authz.VerbAnalytics exactly as Query is with VerbQuery.
type Analytics struct {
	eventgatev1.UnimplementedAnalyticsServiceServer

	store  AnalyticsStore
	floor  Floor
	log    *slog.Logger
	limits query.Limits
	// tenants are the per-tenant quotas and guardrails (nil: none).
	tenants *limits.Limiter
}

// NewAnalytics returns the AnalyticsService with the default limits.
func NewAnalytics(store AnalyticsStore, floor Floor, log *slog.Logger) *Analytics {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Analytics{store: store, floor: floor, log: log, limits: query.DefaultLimits()}
}

// WithLimits replaces the hard limits (for configuration and tests).
func (a *Analytics) WithLimits(l query.Limits) *Analytics {
	a.limits = l
	return a
}

// WithTenantLimits applies the per-tenant query quotas and guardrails of
// lim: a tenant's window and execution time replace the hard limits'.
func (a *Analytics) WithTenantLimits(lim *limits.Limiter) *Analytics {
	a.tenants = lim
	return a
}

// analyticsRequest is any analytics request: its filter fields are
// EventFilter's.
type analyticsRequest interface {
	proto.Message
	GetTenant() *eventgatev1.Tenant
}

// filterOf extracts the EventFilter of req through the wire format (every
// analytics request declares EventFilter's fields with its numbers, checked
// by TestEventFilterFieldsAligned) and reads it exactly as Query reads its
// request: the same validation, selectors and field names.
func filterOf(req analyticsRequest) (query.Filter, bool, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return query.Filter{}, false, fmt.Errorf("encode request: %w", err)
	}
	ef := &eventgatev1.EventFilter{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, ef); err != nil {
		return query.Filter{}, false, fmt.Errorf("decode filter: %w", err)
	}
	b, err = proto.Marshal(ef)
	if err != nil {
		return query.Filter{}, false, fmt.Errorf("encode filter: %w", err)
	}
	qr := &eventgatev1.QueryRequest{}
	if err := proto.Unmarshal(b, qr); err != nil {
		return query.Filter{}, false, fmt.Errorf("decode filter: %w", err)
	}
	q, empty, err := queryFromRequest(qr)
	return q.Filter, empty, err
}

// prepare reads req's filter and the caller's scope, and counts the call
// against its tenant's query quota until release.
func (a *Analytics) prepare(ctx context.Context, req analyticsRequest) (_ context.Context, _ query.Analytics, release func(), _ error) {
	f, empty, err := filterOf(req)
	if err != nil {
		return ctx, query.Analytics{}, nil, err
	}
	sc, err := a.scope(ctx, f.Tenant)
	if err != nil {
		return ctx, query.Analytics{}, nil, err
	}
	ctx, tl, release, err := queryGuard(ctx, a.tenants, sc)
	if err != nil {
		return ctx, query.Analytics{}, nil, err
	}
	if empty {
		// The filter matches nothing: the answer is the empty one, with
		// every request field still checked.
		sc = query.Scope{}
	}
	if tl.MaxQueryWindow > 0 && !f.Since.IsZero() {
		until := f.Until
		if until.IsZero() {
			until = time.Now()
		}
		if d := until.Sub(f.Since); d > tl.MaxQueryWindow {
			release()
			return ctx, query.Analytics{}, nil, invalid("since", "the window spans %s, more than %s (limit maxQueryWindow): narrow since and until", d.Round(time.Second), tl.MaxQueryWindow)
		}
	}
	l := analyticsLimits(a.limits, tl)
	return ctx, query.Analytics{Scope: sc, Filter: f, Limits: &l}, release, nil
}

// scope is Query's scope (Events.scope, which reads only the context) for
// the analytics verb.
func (a *Analytics) scope(ctx context.Context, narrow *query.TenantRef) (query.Scope, error) {
	return (*Events)(nil).scope(ctx, authz.VerbAnalytics, narrow)
}

// analyticsStatus maps store errors: a refused request becomes
// InvalidArgument naming its field (and the limit).
func (a *Analytics) analyticsStatus(method string, err error) error {
	var ae *query.FieldError
	if errors.As(err, &ae) {
		return toStatus(a.log, method, &InvalidError{Violations: []event.Violation{{Field: ae.Field, Description: ae.Detail()}}})
	}
	return toStatus(a.log, method, err)
}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// Histogram implements AnalyticsService.Histogram.
func (a *Analytics) Histogram(ctx context.Context, req *eventgatev1.HistogramRequest) (*eventgatev1.HistogramResponse, error) {
	const method = "Histogram"
	ctx, aq, release, err := a.prepare(ctx, req)
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	defer release()
	q := query.HistogramRequest{Analytics: aq, GroupBy: req.GetGroupBy(), Limit: int(req.GetLimit())}
	if b := req.GetBucket(); b != nil {
		if err := b.CheckValid(); err != nil || b.AsDuration() <= 0 {
			return nil, a.analyticsStatus(method, invalid("bucket", "must be a positive duration"))
		}
		q.Bucket = b.AsDuration()
	}
	h, err := a.store.Histogram(ctx, q)
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	resp := &eventgatev1.HistogramResponse{
		Since: ts(h.Since), Until: ts(h.Until), Bucket: durationpb.New(h.Bucket),
		Totals: h.Totals, GroupBy: req.GetGroupBy(), Total: h.Total, DistinctGroups: int32(h.DistinctGroups),
	}
	for i := range h.Totals {
		resp.BucketStarts = append(resp.BucketStarts, ts(h.Since.Add(time.Duration(i)*h.Bucket)))
	}
	for _, g := range h.Groups {
		resp.Groups = append(resp.Groups, &eventgatev1.HistogramGroup{Values: g.Values, Other: g.Other, Total: g.Total, Counts: g.Counts})
	}
	return resp, nil
}

// Top implements AnalyticsService.Top.
func (a *Analytics) Top(ctx context.Context, req *eventgatev1.TopRequest) (*eventgatev1.TopResponse, error) {
	const method = "Top"
	ctx, aq, release, err := a.prepare(ctx, req)
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	defer release()
	t, err := a.store.Top(ctx, query.TopRequest{Analytics: aq, Dimension: req.GetDimension(), Limit: int(req.GetLimit())})
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	resp := &eventgatev1.TopResponse{
		Since: ts(t.Since), Until: ts(t.Until), PreviousSince: ts(t.PreviousSince), Dimension: req.GetDimension(),
		Total: t.Total, PreviousTotal: t.PreviousTotal, Other: t.Other, DistinctValues: int32(t.Distinct),
	}
	for _, e := range t.Entries {
		te := &eventgatev1.TopEntry{Value: e.Value, Count: e.Count, Share: e.Share, PreviousCount: e.Previous}
		if e.Previous > 0 {
			c := float64(e.Count-e.Previous) / float64(e.Previous)
			te.Change = &c
		}
		resp.Entries = append(resp.Entries, te)
	}
	return resp, nil
}

// Facets implements AnalyticsService.Facets.
func (a *Analytics) Facets(ctx context.Context, req *eventgatev1.FacetsRequest) (*eventgatev1.FacetsResponse, error) {
	const method = "Facets"
	ctx, aq, release, err := a.prepare(ctx, req)
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	defer release()
	f, err := a.store.Facets(ctx, query.FacetsRequest{Analytics: aq, Dimensions: req.GetDimensions(), Limit: int(req.GetLimit())})
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	resp := &eventgatev1.FacetsResponse{Since: ts(f.Since), Until: ts(f.Until), Total: f.Total}
	for _, fc := range f.Facets {
		out := &eventgatev1.Facet{Dimension: fc.Dimension, DistinctValues: int32(fc.Distinct), Other: fc.Other}
		for _, v := range fc.Values {
			out.Values = append(out.Values, &eventgatev1.FacetValue{Value: v.Value, Count: v.Count})
		}
		resp.Facets = append(resp.Facets, out)
	}
	return resp, nil
}

// Series implements AnalyticsService.Series.
func (a *Analytics) Series(ctx context.Context, req *eventgatev1.SeriesRequest) (*eventgatev1.SeriesResponse, error) {
	const method = "Series"
	ctx, aq, release, err := a.prepare(ctx, req)
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	defer release()
	l, err := a.store.Series(ctx, query.SeriesRequest{Analytics: aq, State: req.GetState(), Limit: int(req.GetLimit()), OrderBy: req.GetOrderBy()})
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	resp := &eventgatev1.SeriesResponse{Since: ts(l.Since), Until: ts(l.Until), Total: int32(l.Total)}
	for _, e := range l.Series {
		out := &eventgatev1.SeriesEntry{
			Uid: e.UID, Tenant: &eventgatev1.Tenant{Type: e.Tenant.Type, Name: e.Tenant.Name},
			Reason: e.Reason, Type: e.Type, Action: e.Action, Namespace: e.Namespace,
			Regarding: &eventgatev1.ObjectReference{
				ApiVersion: e.Regarding.APIVersion, Kind: e.Regarding.Kind, Namespace: e.Regarding.Namespace,
				Name: e.Regarding.Name, Uid: e.Regarding.UID, FieldPath: e.Regarding.FieldPath,
			},
			ReportingController: e.ReportingController, ReportingInstance: e.ReportingInstance,
			Count: e.Count, FirstObserved: ts(e.First), LastObserved: ts(e.Last), State: e.State,
			RatePerMinute: e.RatePerMinute(), WindowCount: e.WindowCount,
		}
		for _, m := range e.Minutes {
			out.Minutes = append(out.Minutes, &eventgatev1.MinuteCount{Minute: ts(m.Minute), Count: m.Count})
		}
		resp.Series = append(resp.Series, out)
	}
	return resp, nil
}

// Timeline implements AnalyticsService.Timeline: Query's listing (each
// event once, at its latest version, pinned at the ingest position) of the
// events involving the object, oldest first.
func (a *Analytics) Timeline(ctx context.Context, req *eventgatev1.TimelineRequest) (*eventgatev1.TimelineResponse, error) {
	const method = "Timeline"
	f, empty, err := filterOf(req)
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	obj := req.GetInvolving()
	if obj.GetName() == "" && obj.GetUid() == "" {
		return nil, a.analyticsStatus(method, invalid("involving", "name the object: involving.name (with kind and namespace) or involving.uid"))
	}
	if l := req.GetLimit(); l < 0 || l > query.MaxPageSize {
		return nil, a.analyticsStatus(method, invalid("limit", "must be between 1 and %d (limit MaxPageSize)", query.MaxPageSize))
	}
	q := query.List{Filter: f, OldestFirst: !req.GetNewestFirst(), PageSize: int(req.GetLimit()), PageToken: req.GetPageToken()}
	if q.Scope, err = a.scope(ctx, f.Tenant); err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	ctx, tl, release, err := queryGuard(ctx, a.tenants, q.Scope)
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	defer release()
	wrap, err := queryWindow(&q, tl, time.Now())
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	var rv uint64
	if req.GetPageToken() == "" {
		if rv, err = a.floor.AckFloor(ctx); err != nil {
			return nil, a.analyticsStatus(method, fmt.Errorf("%w: ingest position: %w", ErrUnavailable, err))
		}
	}
	if empty {
		return &eventgatev1.TimelineResponse{ResourceVersion: strconv.FormatUint(rv, 10)}, nil
	}
	page, err := a.store.Query(ctx, q, rv)
	if err != nil {
		return nil, a.analyticsStatus(method, err)
	}
	resp := &eventgatev1.TimelineResponse{NextPageToken: wrap(page.NextPageToken), ResourceVersion: strconv.FormatUint(page.ResourceVersion, 10)}
	for _, ev := range page.Events {
		e := &eventgatev1.TimelineEntry{Event: ev, Role: roleOf(obj, ev), Occurrences: 1, FirstObserved: ev.GetEventTime(), LastObserved: ev.GetEventTime()}
		if s := ev.GetSeries(); s != nil {
			e.Occurrences = int64(max(1, s.GetCount()))
			if s.GetLastObservedTime() != nil {
				e.LastObserved = s.GetLastObservedTime()
			}
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

// roleOf says how the object sel selects takes part in ev.
func roleOf(sel *eventgatev1.ObjectSelector, ev *eventgatev1.Event) string {
	reg, rel := selects(sel, ev.GetRegarding()), selects(sel, ev.GetRelated())
	switch {
	case reg && rel:
		return "both"
	case rel:
		return "related"
	default:
		return "regarding"
	}
}

func selects(sel *eventgatev1.ObjectSelector, o *eventgatev1.ObjectReference) bool {
	if o == nil {
		return false
	}
	for _, c := range [][2]string{
		{sel.GetApiVersion(), o.GetApiVersion()}, {sel.GetKind(), o.GetKind()}, {sel.GetNamespace(), o.GetNamespace()},
		{sel.GetName(), o.GetName()}, {sel.GetUid(), o.GetUid()}, {sel.GetFieldPath(), o.GetFieldPath()},
	} {
		if c[0] != "" && c[0] != c[1] {
			return false
		}
	}
	return o.GetKind() != "" || o.GetName() != "" || o.GetUid() != ""
}
