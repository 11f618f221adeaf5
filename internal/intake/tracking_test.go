package intake

import (
	"context"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// TestTenantTracking: the owners of the partitions report a tenant's
// tracked keys (singletons and ongoing series) as folding leaves them,
// without counting another tenant's.
func TestTenantTracking(t *testing.T) {
	ns := startServer(t)
	r := startReplica(t, ns, "", "a", testConfig())
	p1 := &eventgatev1.Tenant{Type: event.TenantProject, Name: "p1"}
	p2 := &eventgatev1.Tenant{Type: event.TenantProject, Name: "p2"}
	track := func(tn *eventgatev1.Tenant) (keys, series, owned int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return r.in.TenantTracking(ctx, tn)
	}
	if keys, series, _ := track(p1); keys != 0 || series != 0 {
		t.Fatalf("before any event: %d keys, %d series", keys, series)
	}
	for k := range 4 {
		submitOne(t, r.in, context.Background(), occurrence(k, "first"), "")
	}
	submitOne(t, r.in, context.Background(), occurrence(0, "again"), "") // key 0 starts a series
	other := occurrence(9, "other tenant")
	other.Tenant = p2
	submitOne(t, r.in, context.Background(), other, "")

	keys, series, owned := track(p1)
	if keys != 4 || series != 1 || owned < 1 {
		t.Errorf("p1: %d keys, %d series over %d partitions, want 4 keys of which 1 series", keys, series, owned)
	}
	if keys, series, _ := track(p2); keys != 1 || series != 0 {
		t.Errorf("p2: %d keys, %d series, want 1 singleton", keys, series)
	}
}
