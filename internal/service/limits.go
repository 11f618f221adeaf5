package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/query"
)

// limitEmit takes a validated, authorized batch from the emit rate limits
// of its tenants and of p, all or none, before any of it is started.
func limitEmit(lim *limits.Limiter, p *authz.Principal, evs []*eventgatev1.Event) error {
	if lim == nil {
		return nil
	}
	batch := make([]limits.TenantEvents, 0, 1)
	for _, ev := range evs {
		t := authz.Tenant{Type: ev.GetTenant().GetType(), Name: ev.GetTenant().GetName()}
		i := 0
		for i < len(batch) && batch[i].Tenant != t {
			i++
		}
		if i == len(batch) {
			te := limits.TenantEvents{Tenant: t}
			if lim.Tenant(t).ObjectEmitRate > 0 { // keyed only when limited: off by default
				te.Objects = map[string]int{}
			}
			batch = append(batch, te)
		}
		batch[i].Events++
		if batch[i].Objects != nil {
			r := ev.GetRegarding()
			batch[i].Objects[limits.ObjectKey(ev.GetReportingController(), r.GetApiVersion(), r.GetKind(), r.GetNamespace(), r.GetName(), r.GetUid())]++
		}
	}
	return lim.Emit(p.Name, batch)
}

// watchQuota counts a watch against the quotas of p and of the one tenant
// it reads (the tenant it names, or p's only tenant); release ends it.
func watchQuota(lim *limits.Limiter, p *authz.Principal, req *eventgatev1.StreamWatchRequest) (release func(), err error) {
	if lim == nil {
		return func() {}, nil
	}
	var t *authz.Tenant
	switch rt := req.GetTenant(); {
	case rt.GetType() == event.TenantGlobal || (rt.GetType() != "" && rt.GetName() != ""):
		t = &authz.Tenant{Type: rt.GetType(), Name: rt.GetName()}
	case rt.GetType() == "":
		if sc, err := p.Scope(authz.VerbWatch, nil); err == nil {
			t = onlyTenant(sc)
		}
	}
	return lim.AcquireWatch(p.Name, t)
}

// onlyTenant is the tenant a scope holds when it holds exactly one.
func onlyTenant(sc authz.Scope) *authz.Tenant {
	if sc.All || len(sc.Tenants) != 1 || sc.Tenants[0].AnyName() {
		return nil
	}
	return &authz.Tenant{Type: sc.Tenants[0].Type, Name: sc.Tenants[0].Name}
}

// queryGuard counts a query against its tenant's quota and puts the
// tenant's read limits on ctx; it returns the tenant's limits (the
// defaults for a query over several tenants). release ends the query.
func queryGuard(ctx context.Context, lim *limits.Limiter, sc query.Scope) (context.Context, limits.Limits, func(), error) {
	if lim == nil {
		return ctx, limits.Limits{}, func() {}, nil
	}
	var t *authz.Tenant
	if !sc.All && len(sc.Tenants) == 1 && sc.Tenants[0].Name != authz.AnyName {
		t = &authz.Tenant{Type: sc.Tenants[0].Type, Name: sc.Tenants[0].Name}
	}
	p, err := principal(ctx)
	if err != nil {
		return ctx, limits.Limits{}, nil, err
	}
	release, err := lim.AcquireQuery(p.Name, t)
	if err != nil {
		return ctx, limits.Limits{}, nil, err
	}
	l := lim.Tenant(authz.Tenant{})
	if t != nil {
		l = lim.Tenant(*t)
	}
	ctx = query.WithReadLimits(ctx, query.ReadLimits{
		MaxExecutionTime: l.MaxExecutionTime, MaxRowsToRead: l.MaxRowsToRead, MaxBytesToRead: l.MaxBytesToRead,
	})
	return ctx, l, release, nil
}

// queryWindow bounds a listing's window (Query, Timeline): without since it
// reads l.QueryWindow up to until (or now), and no window is longer than
// l.MaxQueryWindow. A default since is carried in the page tokens, so every
// page of a listing reads the same window; wrap wraps a next page token.
func queryWindow(q *query.List, l limits.Limits, now time.Time) (wrap func(string) string, err error) {
	wrap = func(tok string) string { return tok }
	f := &q.Filter
	if q.PageToken != "" {
		if s, inner, ok := strings.Cut(q.PageToken, windowSep); ok {
			us, err := strconv.ParseInt(s, 36, 64)
			if err != nil {
				return nil, query.ErrBadPageToken
			}
			f.Since, q.PageToken = time.UnixMicro(us).UTC(), inner
			return func(tok string) string { return withWindow(tok, f.Since) }, nil
		}
		return wrap, nil // the window is the request's own
	}
	until := f.Until
	if until.IsZero() {
		until = now
	}
	if f.Since.IsZero() && l.QueryWindow > 0 {
		f.Since = until.Add(-l.QueryWindow).Truncate(time.Microsecond) // as the page token carries it
		since := f.Since
		wrap = func(tok string) string { return withWindow(tok, since) }
	}
	if l.MaxQueryWindow > 0 {
		switch d := until.Sub(f.Since); {
		case f.Since.IsZero():
			return nil, invalid("since", "is required: no window may be longer than %s (limit maxQueryWindow)", l.MaxQueryWindow)
		case d > l.MaxQueryWindow:
			return nil, invalid("since", "the window spans %s, more than %s (limit maxQueryWindow): narrow since and until", d.Round(time.Second), l.MaxQueryWindow)
		}
	}
	return wrap, nil
}

// windowSep ends the default since (base-36 Unix microseconds) before the
// store's own page token (base64url, which has no ".").
const windowSep = "."

func withWindow(tok string, since time.Time) string {
	if tok == "" {
		return ""
	}
	return strconv.FormatInt(since.UnixMicro(), 36) + windowSep + tok
}

// analyticsLimits are the analytics limits with a tenant's window and
// execution time (zero: its own).
func analyticsLimits(a query.Limits, l limits.Limits) query.Limits {
	if l.MaxQueryWindow > 0 {
		a.MaxRange = l.MaxQueryWindow
	}
	if l.MaxExecutionTime > 0 {
		a.MaxExecutionTime = l.MaxExecutionTime
	}
	return a
}

// limitStatus maps a refusal of the limits; ok is false for other errors.
func limitStatus(err error) (error, bool) {
	var re *limits.RateError
	var qe *limits.QuotaError
	var rle *query.ReadLimitError
	switch {
	case errors.As(err, &re) && re.RetryAfter == 0:
		return invalidStatus(&InvalidError{Violations: []event.Violation{{Field: "events", Description: re.Error()}}}), true
	case errors.As(err, &re):
		return exhausted(re.Error(), "RATE_LIMITED", map[string]string{"limit": re.Limit, "who": re.Who}, re.RetryAfter), true
	case errors.As(err, &qe):
		return exhausted(qe.Error(), "QUOTA_EXCEEDED", map[string]string{"limit": qe.Limit, "who": qe.Who}, qe.RetryAfter), true
	case errors.As(err, &rle):
		return invalidStatus(&InvalidError{Violations: []event.Violation{{Field: "since",
			Description: fmt.Sprintf("%v: narrow the window (since, until) or filter by tenant, namespace, object or reason", rle)}}}), true
	}
	return nil, false
}

// exhausted is a ResourceExhausted status with its reason and, when the
// caller should wait, a RetryInfo (HTTP: Retry-After).
func exhausted(msg, reason string, md map[string]string, retry time.Duration) error {
	st := status.New(codes.ResourceExhausted, msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: "eventgate.io", Metadata: md}}
	if retry > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	}
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st.Err()
}
