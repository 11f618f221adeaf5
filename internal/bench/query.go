package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// QueryKind is one read measured on the generated store.
type QueryKind struct {
	Name string
	// Analytics reads are held to the analytics target, the others to the
	// Query/Get one.
	Analytics bool
	// GoalMS, when set, replaces that target (p50, warm).
	GoalMS float64
	// Cold: the first call (before any warm-up) is reported too, against
	// 500 ms.
	Cold bool
	call func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error
}

// dayWindow is a dashboard's "last 24 hours", ending at a random instant of
// the store's newest ten minutes (so no two calls read the same window).
func dayWindow(info *StoreInfo, rng *rand.Rand) (since, until *timestamppb.Timestamp) {
	end := info.End.Add(-time.Duration(rng.IntN(600)) * time.Second)
	return timestamppb.New(end.Add(-24 * time.Hour)), timestamppb.New(end)
}

// window is the last d, ending at a random instant of the store's newest
// ten minutes.
func window(info *StoreInfo, rng *rand.Rand, d time.Duration) (since, until *timestamppb.Timestamp) {
	end := info.End.Add(-time.Duration(rng.IntN(600)) * time.Second)
	return timestamppb.New(end.Add(-d)), timestamppb.New(end)
}

func tenantOf(info *StoreInfo, rng *rand.Rand) *eventgatev1.Tenant {
	t := info.Tenants[rng.IntN(len(info.Tenants))]
	return &eventgatev1.Tenant{Type: t[0], Name: t[1]}
}

// QueryKinds are the reads of the query phase, each for one tenant, through
// the gateway's gRPC API.
var QueryKinds = []QueryKind{
	{Name: "Query newest 100 of one object", call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
		o := info.Objects[rng.IntN(len(info.Objects))]
		resp, err := g.Events.Query(ctx, &eventgatev1.QueryRequest{
			Tenant:    &eventgatev1.Tenant{Type: o.TenantType, Name: o.TenantName},
			Regarding: &eventgatev1.ObjectSelector{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name},
			PageSize:  100,
			// The whole store (30 days), not the default 7-day window.
			Since: timestamppb.New(time.Now().Add(-30*24*time.Hour - 12*time.Hour)),
		})
		if err != nil {
			return notBuilt(err)
		}
		if len(resp.Events) == 0 || resp.Events[0].GetRegarding().GetName() != o.Name {
			return fmt.Errorf("no events of %s/%s %s/%s", o.TenantName, o.Kind, o.Namespace, o.Name)
		}
		return nil
	}},
	{Name: "Query newest 100 of a tenant, no time bound", call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
		// No since: the default window (7 days) bounds what it reads.
		_, err := g.Events.Query(ctx, &eventgatev1.QueryRequest{Tenant: tenantOf(info, rng), PageSize: 100})
		return notBuilt(err)
	}},
	{Name: "Get by uid", call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
		u := info.UIDs[rng.IntN(len(info.UIDs))]
		resp, err := g.Events.Get(ctx, &eventgatev1.GetRequest{Uid: u.UID, Tenant: &eventgatev1.Tenant{Type: u.TenantType, Name: u.TenantName}})
		if err != nil {
			return notBuilt(err)
		}
		if resp.Event.GetUid() != u.UID {
			return fmt.Errorf("get %s: got %q", u.UID, resp.Event.GetUid())
		}
		return nil
	}},
	{Name: "Histogram 24h by reason", Analytics: true, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
		since, until := dayWindow(info, rng)
		_, err := g.Analytics.Histogram(ctx, &eventgatev1.HistogramRequest{Tenant: tenantOf(info, rng), Since: since, Until: until, GroupBy: []string{"reason"}})
		return notBuilt(err)
	}},
	{Name: "Top 10 reasons 24h", Analytics: true, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
		since, until := dayWindow(info, rng)
		_, err := g.Analytics.Top(ctx, &eventgatev1.TopRequest{Tenant: tenantOf(info, rng), Since: since, Until: until, Dimension: "reason", Limit: 10})
		return notBuilt(err)
	}},
	{Name: "Facets 24h (default dimensions)", Analytics: true, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
		since, until := dayWindow(info, rng)
		_, err := g.Analytics.Facets(ctx, &eventgatev1.FacetsRequest{Tenant: tenantOf(info, rng), Since: since, Until: until})
		return notBuilt(err)
	}},
}

// RunQueries calls k n times, one after another, and returns each call's
// latency in milliseconds.
func RunQueries(ctx context.Context, g *Gateway, info *StoreInfo, k QueryKind, n int, seed uint64) ([]float64, error) {
	rng := rand.New(rand.NewPCG(seed, 99))
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := k.call(ctx, g, info, rng); err != nil {
			return nil, fmt.Errorf("%s: %w", k.Name, err)
		}
		lat = append(lat, float64(time.Since(start))/float64(time.Millisecond))
	}
	return lat, nil
}

// largeTenant is the generated store's large tenant; nil stands for every
// tenant (the bench calls as an administrator).
func largeTenant() *eventgatev1.Tenant {
	return &eventgatev1.Tenant{Type: LargeTenant[0], Name: LargeTenant[1]}
}

// newest100 lists the newest 100 events of tenant (nil: every tenant)
// matching req's filter, and checks that the page is full and newest first.
func newest100(ctx context.Context, g *Gateway, tenant *eventgatev1.Tenant, req *eventgatev1.QueryRequest) error {
	req.Tenant, req.PageSize = tenant, 100
	resp, err := g.Events.Query(ctx, req)
	if err != nil {
		return notBuilt(err)
	}
	if len(resp.Events) != 100 {
		return fmt.Errorf("newest 100: got %d events", len(resp.Events))
	}
	for i := 1; i < len(resp.Events); i++ {
		if resp.Events[i].GetEventTime().AsTime().After(resp.Events[i-1].GetEventTime().AsTime()) {
			return fmt.Errorf("newest 100: event %d is newer than event %d", i, i-1)
		}
	}
	return nil
}

// DashboardKinds are the reads a dashboard, the console or an operator
// makes first (issue 22): the newest events of the large tenant and of
// every tenant, with a kind or type filter or a 1-hour window, and
// analytics over 24 hours and 30 days for the large tenant and every
// tenant. Newest-first reads are also reported cold (first call).
var DashboardKinds = func() []QueryKind {
	var ks []QueryKind
	for _, sc := range []struct {
		name   string
		tenant func() *eventgatev1.Tenant
	}{{"large tenant", largeTenant}, {"every tenant", func() *eventgatev1.Tenant { return nil }}} {
		ks = append(ks,
			QueryKind{Name: "Newest 100, " + sc.name, Cold: true, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
				return newest100(ctx, g, sc.tenant(), &eventgatev1.QueryRequest{})
			}},
			QueryKind{Name: "Newest 100 Pods, " + sc.name, Cold: true, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
				return newest100(ctx, g, sc.tenant(), &eventgatev1.QueryRequest{Regarding: &eventgatev1.ObjectSelector{Kind: "Pod"}})
			}},
			QueryKind{Name: "Newest 100 Warnings of 1h, " + sc.name, Cold: true, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
				since, _ := window(info, rng, time.Hour)
				return newest100(ctx, g, sc.tenant(), &eventgatev1.QueryRequest{Type: []string{"Warning"}, Since: since})
			}},
		)
		for _, w := range []struct {
			name string
			d    time.Duration
			goal float64
		}{{"24h", 24 * time.Hour, 100}, {"30d", 30 * 24 * time.Hour, 250}} {
			ks = append(ks,
				QueryKind{Name: "Facets " + w.name + ", " + sc.name, Analytics: true, GoalMS: w.goal, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
					since, until := window(info, rng, w.d)
					_, err := g.Analytics.Facets(ctx, &eventgatev1.FacetsRequest{Tenant: sc.tenant(), Since: since, Until: until})
					return notBuilt(err)
				}},
				QueryKind{Name: "Top 10 reasons " + w.name + ", " + sc.name, Analytics: true, GoalMS: w.goal, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
					since, until := window(info, rng, w.d)
					_, err := g.Analytics.Top(ctx, &eventgatev1.TopRequest{Tenant: sc.tenant(), Since: since, Until: until, Dimension: "reason", Limit: 10})
					return notBuilt(err)
				}},
				QueryKind{Name: "Histogram by type " + w.name + ", " + sc.name, Analytics: true, GoalMS: w.goal, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
					since, until := window(info, rng, w.d)
					_, err := g.Analytics.Histogram(ctx, &eventgatev1.HistogramRequest{Tenant: sc.tenant(), Since: since, Until: until, GroupBy: []string{"type"}})
					return notBuilt(err)
				}},
			)
		}
		ks = append(ks, QueryKind{Name: "Top 10 objects with Warnings 1h, " + sc.name, Analytics: true, call: func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error {
			since, until := window(info, rng, time.Hour)
			_, err := g.Analytics.Top(ctx, &eventgatev1.TopRequest{Tenant: sc.tenant(), Since: since, Until: until, Type: []string{"Warning"}, Dimension: "regarding", Limit: 10})
			return notBuilt(err)
		}})
	}
	return ks
}()
