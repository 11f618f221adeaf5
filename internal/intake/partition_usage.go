package intake

import (
	"context"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// tenantReq asks a partition's owner for one tenant's tracked keys. The
// aggregator belongs to the partition's goroutine, so it answers between
// two deliveries instead of sharing it under a lock.
type tenantReq struct {
	typ, name string
	reply     chan tenantKeys // buffered: the owner never waits on it
}

type tenantKeys struct{ keys, series int }

// answer serves r from the aggregator; the partition's goroutine calls it.
func (pt *partition) answer(r tenantReq) {
	var k tenantKeys
	if pt.agg != nil {
		k.keys, k.series = pt.agg.TenantKeys(r.typ, r.name)
	}
	r.reply <- k
}

// TenantTracking returns the series keys the partitions this replica owns
// track for tenant t (singletons and ongoing series) and the ongoing series
// among them, and how many partitions answered. Each owner answers between
// two deliveries of its log; one that does not before ctx ends (it is
// handing its partition over, or checkpointing) is left out of owned.
func (in *Intake) TenantTracking(ctx context.Context, t *eventgatev1.Tenant) (keys, series, owned int) {
	for _, pt := range in.parts {
		if !pt.owned.Load() {
			continue
		}
		r := tenantReq{typ: t.GetType(), name: t.GetName(), reply: make(chan tenantKeys, 1)}
		select {
		case pt.usage <- r:
		case <-ctx.Done():
			continue
		}
		select {
		case k := <-r.reply:
			keys, series, owned = keys+k.keys, series+k.series, owned+1
		case <-ctx.Done():
		}
	}
	return keys, series, owned
}
