package limits

import (
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/authz"
)

// TestUsage: a tenant's usage counts the events it had accepted and limited
// over the last RateWindow, its bucket's level and its watches and queries,
// under its own limits; another tenant's load is not in it.
func TestUsage(t *testing.T) {
	cfg := DefaultConfig()
	rate, burst := 1.0, 10
	cfg.Tenants = map[string]Override{"project/shop": {EmitRate: &rate, EmitBurst: &burst}}
	l, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	l.now = func() time.Time { return now }
	shop, blog := authz.Tenant{Type: "project", Name: "shop"}, authz.Tenant{Type: "project", Name: "blog"}

	if u := l.Usage(shop); u.Accepted != 0 || u.BurstAvailable != 10 || u.Limits.EmitRate != 1 {
		t.Fatalf("idle: %+v", u)
	}
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 6}, {Tenant: blog, Events: 100}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 9}}); err == nil {
		t.Fatal("9 events over a bucket of 6 were accepted")
	}
	release, err := l.AcquireQuery("p", &shop)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	u := l.Usage(shop)
	if u.Accepted != 6 || u.Limited != 9 || u.Rate != 0.6 || u.BurstAvailable != 6 || u.Queries != 1 || u.Watches != 0 {
		t.Errorf("after a burst: %+v, want 6 accepted, 9 limited, 6 tokens, 1 query", u)
	}
	// Past the window, the counts are gone; the bucket refilled.
	now = now.Add(RateWindow)
	if u := l.Usage(shop); u.Accepted != 0 || u.Limited != 0 || u.BurstAvailable != 10 {
		t.Errorf("after the window: %+v", u)
	}
}
