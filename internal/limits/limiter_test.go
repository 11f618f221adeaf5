package limits

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gopkg.in/yaml.v3"

	"github.com/eventgate/eventgate/internal/authz"
)

var (
	shop  = authz.Tenant{Type: "project", Name: "shop"}
	other = authz.Tenant{Type: "project", Name: "other"}
)

// clock is a manual clock for a limiter.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestLimiter(t *testing.T, cfg Config) (*Limiter, *clock, *prometheus.Registry) {
	t.Helper()
	if err := cfg.Validate(1); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	l, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	l.now = c.now
	return l, c, reg
}

func TestEmitRateLimitRefillsAndSaysWhenToRetry(t *testing.T) {
	l, c, _ := newTestLimiter(t, Config{Tenant: Limits{EmitRate: 10, EmitBurst: 20}})
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 20}}); err != nil {
		t.Fatalf("a burst's worth: %v", err)
	}
	err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 5}})
	var re *RateError
	if !errors.As(err, &re) || !errors.Is(err, ErrLimited) {
		t.Fatalf("over the limit: %v, want a RateError", err)
	}
	if re.RetryAfter != 500*time.Millisecond || re.Who != "tenant project/shop" {
		t.Errorf("refusal %+v, want tenant project/shop, retry in 500ms (5 events at 10/s)", re)
	}
	if !strings.Contains(err.Error(), "emitRate") {
		t.Errorf("message %q does not name the limit", err)
	}
	if err := l.Emit("p", []TenantEvents{{Tenant: other, Events: 20}}); err != nil {
		t.Errorf("another tenant is limited by shop's bucket: %v", err)
	}
	c.advance(500 * time.Millisecond)
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 5}}); err != nil {
		t.Errorf("after the wait it said: %v", err)
	}
}

func TestEmitTakesAllOrNothing(t *testing.T) {
	l, c, _ := newTestLimiter(t, Config{Tenant: Limits{EmitRate: 10, EmitBurst: 10}})
	if err := l.Emit("p", []TenantEvents{{Tenant: other, Events: 8}}); err != nil {
		t.Fatal(err)
	}
	// shop could take 5, other only 2: nothing is taken from shop.
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 5}, {Tenant: other, Events: 5}}); err == nil {
		t.Fatal("a batch over one tenant's limit was accepted")
	}
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 10}}); err != nil {
		t.Errorf("the refused batch took shop's tokens: %v", err)
	}
	c.advance(time.Second)
	// The principal's bucket refuses too, and gives the tenants' back.
	l2, _, _ := newTestLimiter(t, Config{Tenant: Limits{EmitRate: 10, EmitBurst: 10}, Principal: Limits{EmitRate: 10, EmitBurst: 10}})
	if err := l2.Emit("p", []TenantEvents{{Tenant: shop, Events: 6}, {Tenant: other, Events: 6}}); err == nil {
		t.Fatal("12 events passed a principal bucket of 10")
	} else if re := (*RateError)(nil); !errors.As(err, &re) || re.Who != "principal p" || re.RetryAfter != 0 {
		t.Errorf("refusal %v, want principal p's burst", err)
	}
	if err := l2.Emit("q", []TenantEvents{{Tenant: shop, Events: 10}}); err != nil {
		t.Errorf("the refused batch took shop's tokens: %v", err)
	}
}

func TestEmitBatchLargerThanBurstNeverFits(t *testing.T) {
	l, _, _ := newTestLimiter(t, Config{Tenant: Limits{EmitRate: 10, EmitBurst: 10}})
	err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 11}})
	var re *RateError
	if !errors.As(err, &re) || re.RetryAfter != 0 || !strings.Contains(err.Error(), "emitBurst") {
		t.Fatalf("11 events into a burst of 10: %v, want a RateError naming emitBurst without a retry", err)
	}
}

func TestOverridesByTypeThenName(t *testing.T) {
	var cfg Config
	if err := yaml.Unmarshal([]byte(`
tenant: {emitRate: 100, emitBurst: 200, watches: 10, queries: 4}
principal: {emitRate: 1000, emitBurst: 2000}
tenants:
  project/*: {emitRate: 50}
  project/shop: {emitBurst: 500, queries: 0}
  user/*: {watches: 1}
  global: {emitRate: 0}
principals:
  relay: {emitRate: 5000}
`), &cfg); err != nil {
		t.Fatal(err)
	}
	l, _, _ := newTestLimiter(t, cfg)
	for _, tc := range []struct {
		t                  authz.Tenant
		rate               float64
		burst, watches, qs int
	}{
		{shop, 50, 500, 10, 0},
		{other, 50, 200, 10, 4},
		{authz.Tenant{Type: "user", Name: "ann"}, 100, 200, 1, 4},
		{authz.Tenant{Type: "organization", Name: "acme"}, 100, 200, 10, 4},
		{authz.Tenant{Type: "global"}, 0, 200, 10, 4},
	} {
		got := l.Tenant(tc.t)
		if got.EmitRate != tc.rate || got.EmitBurst != tc.burst || got.Watches != tc.watches || got.Queries != tc.qs {
			t.Errorf("%v: %+v, want rate %v burst %d watches %d queries %d", tc.t, got, tc.rate, tc.burst, tc.watches, tc.qs)
		}
	}
	if p := l.Principal("relay"); p.EmitRate != 5000 || p.EmitBurst != 2000 {
		t.Errorf("principal relay: %+v", p)
	}
	if p := l.Principal("anyone"); p.EmitRate != 1000 {
		t.Errorf("principal anyone: %+v", p)
	}
}

func TestConfigValidation(t *testing.T) {
	one := func(v float64) *float64 { return &v }
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"burst under a batch":    {Config{Tenant: Limits{EmitRate: 10, EmitBurst: 10}}, "emitBurst 10 is less than a batch can hold"},
		"negative":               {Config{Tenant: Limits{Watches: -1}}, "must not be negative"},
		"bad key":                {Config{Tenants: map[string]Override{"team/x": {}}}, `"team/x"`},
		"empty name":             {Config{Tenants: map[string]Override{"project/": {}}}, `"project/"`},
		"principal query limits": {Config{Principal: Limits{Queries: 3}}, "query limits are per tenant"},
		"override burst":         {Config{Tenant: Limits{EmitRate: 10, EmitBurst: 1000}, Tenants: map[string]Override{"project/x": {EmitRate: one(5), EmitBurst: new(int)}}}, `tenants["project/x"]`},
		"window over max":        {Config{Tenant: Limits{QueryWindow: 48 * time.Hour, MaxQueryWindow: 24 * time.Hour}}, "longer than maxQueryWindow"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate(100)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
	if err := DefaultConfig().Validate(1000); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestWatchQuotaPerPrincipalAndTenant(t *testing.T) {
	l, _, _ := newTestLimiter(t, Config{Tenant: Limits{Watches: 2}, Principal: Limits{Watches: 3}})
	r1, err := l.AcquireWatch("a", &shop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireWatch("b", &shop); err != nil {
		t.Fatal(err)
	}
	_, err = l.AcquireWatch("c", &shop)
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Who != "tenant project/shop" || qe.Limit != "watches" || qe.Max != 2 {
		t.Fatalf("third watch of shop: %v, want tenant project/shop's watches (2)", err)
	}
	if l.watchPrincipals.inProgress("c") != 0 {
		t.Error("the refused watch still counts against its principal")
	}
	r1()
	r1() // release is idempotent
	if _, err := l.AcquireWatch("c", &shop); err != nil {
		t.Errorf("after one ended: %v", err)
	}
	for range 3 {
		if _, err := l.AcquireWatch("a", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.AcquireWatch("a", nil); !errors.As(err, &qe) || qe.Who != "principal a" || !strings.Contains(err.Error(), "limit watches") {
		t.Fatalf("fourth watch of principal a: %v, want principal a's watches (3)", err)
	}
}

func TestQueryQuotaPerTenant(t *testing.T) {
	l, _, _ := newTestLimiter(t, Config{Tenant: Limits{Queries: 1}})
	release, err := l.AcquireQuery("a", &shop)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.AcquireQuery("b", &shop)
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Limit != "queries" || qe.RetryAfter == 0 {
		t.Fatalf("second query of shop: %v, want its queries quota with a retry", err)
	}
	if _, err := l.AcquireQuery("b", &other); err != nil {
		t.Errorf("another tenant's query: %v", err)
	}
	if _, err := l.AcquireQuery("b", nil); err != nil {
		t.Errorf("a query over several tenants: %v", err)
	}
	release()
	if _, err := l.AcquireQuery("b", &shop); err != nil {
		t.Errorf("after the first ended: %v", err)
	}
}

func TestMetricsTenantLabelsAreBounded(t *testing.T) {
	l, _, reg := newTestLimiter(t, Config{Tenant: Limits{EmitRate: 1e6, EmitBurst: 1e6}})
	for i := range 3 * maxTenantLabels {
		tn := authz.Tenant{Type: "project", Name: "t" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
		if err := l.Emit("p", []TenantEvents{{Tenant: tn, Events: promoteAfter}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 { // light tenants stay under "other"
		if err := l.Emit("p", []TenantEvents{{Tenant: authz.Tenant{Type: "user", Name: "u" + string(rune('a'+i%26)) + string(rune('a'+i/26))}, Events: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.CollectAndCount(reg, "eventgate_tenant_requests_total"); n != maxTenantLabels+1 {
		t.Errorf("%d series, want %d tenants and other", n, maxTenantLabels+1)
	}
	m := l.metrics.requests
	if got := testutil.ToFloat64(m.WithLabelValues(OtherTenants, "emit", "accepted")); got != float64(2*maxTenantLabels*promoteAfter+50) {
		t.Errorf("other: %v events, want the rest summed (%d)", got, 2*maxTenantLabels*promoteAfter+50)
	}
}

func TestObjectEmitLimitPerSourceAndObject(t *testing.T) {
	l, c, _ := newTestLimiter(t, Config{Tenant: Limits{ObjectEmitRate: 1, ObjectEmitBurst: 2}})
	pod := ObjectKey("kubelet", "v1", "Pod", "web", "api-0", "")
	other := ObjectKey("kubelet", "v1", "Pod", "web", "api-1", "")
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 2, Objects: map[string]int{pod: 2}}}); err != nil {
		t.Fatal(err)
	}
	err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 2, Objects: map[string]int{pod: 1, other: 1}}})
	var re *RateError
	if !errors.As(err, &re) || re.Limit != "objectEmitRate" || re.RetryAfter != time.Second {
		t.Fatalf("a third event about api-0: %v, want objectEmitRate, retry in 1s", err)
	}
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 2, Objects: map[string]int{other: 2}}}); err != nil {
		t.Errorf("another object (the refused batch took nothing of it): %v", err)
	}
	if err := l.Emit("p", []TenantEvents{{Tenant: other2, Events: 2, Objects: map[string]int{pod: 2}}}); err != nil {
		t.Errorf("the same object in another tenant: %v", err)
	}
	c.advance(time.Second)
	if err := l.Emit("p", []TenantEvents{{Tenant: shop, Events: 1, Objects: map[string]int{pod: 1}}}); err != nil {
		t.Errorf("after a second: %v", err)
	}
}

var other2 = authz.Tenant{Type: "user", Name: "ann"}
