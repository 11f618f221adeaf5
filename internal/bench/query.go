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
	call      func(ctx context.Context, g *Gateway, info *StoreInfo, rng *rand.Rand) error
}

// dayWindow is a dashboard's "last 24 hours", ending at a random instant of
// the store's newest ten minutes (so no two calls read the same window).
func dayWindow(info *StoreInfo, rng *rand.Rand) (since, until *timestamppb.Timestamp) {
	end := info.End.Add(-time.Duration(rng.IntN(600)) * time.Second)
	return timestamppb.New(end.Add(-24 * time.Hour)), timestamppb.New(end)
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
