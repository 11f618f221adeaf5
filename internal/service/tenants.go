package service

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/query"
)

// StoredCounter tells what the store holds for a tenant
// (internal/clickhouse implements it).
type StoredCounter interface {
	TenantStored(ctx context.Context, typ, name string) (events, bytes int64, err error)
}

// Tracker tells what the series aggregation tracks for a tenant
// (internal/intake implements it).
type Tracker interface {
	TenantTracking(ctx context.Context, t *eventgatev1.Tenant) (keys, series, owned int)
}

// trackingWait bounds how long GetUsage waits for the partitions' owners,
// which answer between two deliveries of their logs.
const trackingWait = 2 * time.Second

// Tenants implements eventgate.v1.TenantService, for administrators.
type Tenants struct {
	eventgatev1.UnimplementedTenantServiceServer

	limiter *limits.Limiter
	tracker Tracker // nil: the series aggregation is off
	store   StoredCounter
	log     *slog.Logger
	now     func() time.Time
}

// NewTenants returns the TenantService; tracker may be nil.
func NewTenants(lim *limits.Limiter, tracker Tracker, store StoredCounter, log *slog.Logger) *Tenants {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Tenants{limiter: lim, tracker: tracker, store: store, log: log, now: time.Now}
}

// GetUsage reports a tenant's usage to an administrator.
func (s *Tenants) GetUsage(ctx context.Context, req *eventgatev1.GetUsageRequest) (*eventgatev1.GetUsageResponse, error) {
	u, err := s.usage(ctx, req)
	if err != nil {
		return nil, toStatus(s.log, "GetUsage", err)
	}
	return &eventgatev1.GetUsageResponse{Usage: u}, nil
}

func (s *Tenants) usage(ctx context.Context, req *eventgatev1.GetUsageRequest) (*eventgatev1.TenantUsage, error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.AuthorizeAdmin(); err != nil {
		return nil, err
	}
	t := &eventgatev1.Tenant{Type: req.GetTenant().GetType(), Name: req.GetTenant().GetName()}
	if vs := event.ValidateTenant(t); len(vs) > 0 {
		return nil, tenantInvalid(vs)
	}
	at := authz.Tenant{Type: t.Type, Name: t.Name}
	out := &eventgatev1.TenantUsage{Tenant: t, ObservedAt: timestamppb.New(s.now()), Tracking: &eventgatev1.SeriesTracking{}}

	lu := s.limiter.Usage(at)
	l := lu.Limits
	out.Limits = &eventgatev1.TenantLimits{
		EmitRate: l.EmitRate, EmitBurst: int32(l.EmitBurst), ObjectEmitRate: l.ObjectEmitRate, ObjectEmitBurst: int32(l.ObjectEmitBurst),
		Watches: int32(l.Watches), Queries: int32(l.Queries),
		QueryWindow: durationpb.New(l.QueryWindow), MaxQueryWindow: durationpb.New(l.MaxQueryWindow),
		MaxExecutionTime: durationpb.New(l.MaxExecutionTime), MaxRowsToRead: l.MaxRowsToRead, MaxBytesToRead: l.MaxBytesToRead,
	}
	out.Emit = &eventgatev1.EmitUsage{Rate: lu.Rate, Window: durationpb.New(limits.RateWindow), Accepted: lu.Accepted, Limited: lu.Limited, BurstAvailable: lu.BurstAvailable}
	out.ActiveWatches, out.ActiveQueries = int32(lu.Watches), int32(lu.Queries)

	if s.tracker != nil {
		tctx, cancel := context.WithTimeout(ctx, trackingWait)
		keys, series, owned := s.tracker.TenantTracking(tctx, t)
		cancel()
		out.Tracking = &eventgatev1.SeriesTracking{Keys: int64(keys), Series: int64(series), OwnedPartitions: int32(owned)}
	}

	// The count is a query of the tenant's: it runs under the tenant's
	// read limits, so that a report on a huge tenant stops where its own
	// queries would.
	rctx := query.WithReadLimits(ctx, query.ReadLimits{MaxExecutionTime: l.MaxExecutionTime, MaxRowsToRead: l.MaxRowsToRead, MaxBytesToRead: l.MaxBytesToRead})
	events, bytes, err := s.store.TenantStored(rctx, t.Type, t.Name)
	if err != nil {
		return nil, err
	}
	out.Stored = &eventgatev1.StoredUsage{Events: events, Bytes: bytes}
	return out, nil
}
