package limits

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/eventgate/eventgate/internal/authz"
)

// ErrLimited is matched (errors.Is) by every refusal of this package.
var ErrLimited = errors.New("limit reached")

// RateError refuses a batch over an emit rate limit. Nothing of the batch
// was taken.
type RateError struct {
	// Who is "tenant project/shop" or "principal shop-ci".
	Who string
	// Limit is the limit's name: emitRate or objectEmitRate.
	Limit string
	Rate  float64
	Burst int
	// Events is the batch's events for Who.
	Events int
	// RetryAfter is when the batch would fit; zero when it never can
	// (Events > Burst).
	RetryAfter time.Duration
}

func (e *RateError) Error() string {
	if e.RetryAfter == 0 {
		return fmt.Sprintf("%d events for %s are more than its emit burst of %d (limit %s): send smaller batches", e.Events, e.Who, e.Burst, burstName(e.Limit))
	}
	return fmt.Sprintf("%s is over its emit rate limit of %s events/s, burst %d (limit %s): retry in %s",
		e.Who, strconv.FormatFloat(e.Rate, 'f', -1, 64), e.Burst, e.Limit, e.RetryAfter.Round(time.Millisecond))
}

func (e *RateError) Is(target error) bool { return target == ErrLimited }

func burstName(rateName string) string {
	if rateName == "objectEmitRate" {
		return "objectEmitBurst"
	}
	return "emitBurst"
}

// QuotaError refuses a watch or query over a concurrency quota.
type QuotaError struct {
	// Who is "tenant project/shop" or "principal shop-ci".
	Who string
	// Limit is the limit's name in the configuration: "watches" or "queries".
	Limit string
	Max   int
	// RetryAfter suggests when to try again (queries end soon; a watch
	// ends when its client closes one): zero for none.
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	what := "watches"
	if e.Limit == "queries" {
		what = "queries"
	}
	return fmt.Sprintf("%s already has %d concurrent %s, its limit (limit %s): end one, or ask an operator to raise limits.%s", e.Who, e.Max, what, e.Limit, e.Limit)
}

func (e *QuotaError) Is(target error) bool { return target == ErrLimited }

// Limiter applies a Config. It is safe for concurrent use.
type Limiter struct {
	tenants    *table
	principal  Limits
	principals map[string]Limits
	now        func() time.Time

	emitTenants, emitPrincipals, emitObjects buckets
	watchTenants, watchPrincipals,
	queries counters
	// meter counts each tenant's accepted and limited events lately (Usage).
	meter   meter
	metrics *Metrics
}

// New returns the limiter of cfg; its metrics are registered with reg (nil:
// none).
func New(cfg Config, reg prometheus.Registerer) (*Limiter, error) {
	t, err := newTable(cfg.Tenant, cfg.Tenants)
	if err != nil {
		return nil, err
	}
	l := &Limiter{tenants: t, principal: cfg.Principal, principals: map[string]Limits{}, now: time.Now, metrics: newMetrics(reg)}
	for name, o := range cfg.Principals {
		l.principals[name] = o.apply(cfg.Principal)
	}
	return l, nil
}

// Tenant returns the limits of tenant t.
func (l *Limiter) Tenant(t authz.Tenant) Limits { return l.tenants.lookup(t) }

// Principal returns the limits of the principal named name.
func (l *Limiter) Principal(name string) Limits {
	if p, ok := l.principals[name]; ok {
		return p
	}
	return l.principal
}

// TenantEvents is the events of a batch for one tenant.
type TenantEvents struct {
	Tenant authz.Tenant
	Events int
	// Objects counts the events by source and object (ObjectKey), for
	// the tenant's per-object limit.
	Objects map[string]int
}

// ObjectKey names the source (reporting controller) of an event and the
// object it regards, for the per-object limit.
func ObjectKey(controller, apiVersion, kind, namespace, name, uid string) string {
	return controller + "\x00" + apiVersion + "\x00" + kind + "\x00" + namespace + "\x00" + name + "\x00" + uid
}

// Emit takes a batch's events from the buckets of each tenant and of the
// principal, all or none: when one bucket cannot take its share now, what
// was taken from the others is given back and a *RateError says when the
// whole batch would fit.
func (l *Limiter) Emit(principal string, batch []TenantEvents) error {
	now := l.now()
	var taken []*rate.Reservation
	var refusal *RateError
	take := func(bs *buckets, key, who, limit string, rate float64, burst, n int) bool {
		if rate <= 0 {
			return true
		}
		r := bs.get(key, rate, burst, now).ReserveN(now, n)
		switch {
		case !r.OK():
			refusal = &RateError{Who: who, Limit: limit, Rate: rate, Burst: burst, Events: n}
			return false
		case r.DelayFrom(now) > 0:
			d := r.DelayFrom(now)
			r.CancelAt(now)
			if refusal == nil || (refusal.RetryAfter > 0 && d > refusal.RetryAfter) {
				refusal = &RateError{Who: who, Limit: limit, Rate: rate, Burst: burst, Events: n, RetryAfter: d}
			}
			return true // go on: the batch waits for the slowest bucket
		}
		taken = append(taken, r)
		return true
	}
	total := 0
batch:
	for _, te := range batch {
		total += te.Events
		key, tl := Key(te.Tenant), l.Tenant(te.Tenant)
		if !take(&l.emitTenants, key, "tenant "+key, "emitRate", tl.EmitRate, tl.EmitBurst, te.Events) {
			break
		}
		if tl.ObjectEmitRate <= 0 {
			continue
		}
		for obj, n := range te.Objects {
			if !take(&l.emitObjects, key+"\x00"+obj, "an object's source in tenant "+key, "objectEmitRate", tl.ObjectEmitRate, tl.ObjectEmitBurst, n) {
				break batch
			}
		}
	}
	if refusal == nil || refusal.RetryAfter > 0 {
		pl := l.Principal(principal)
		take(&l.emitPrincipals, principal, "principal "+principal, "emitRate", pl.EmitRate, pl.EmitBurst, total)
	}
	if refusal != nil {
		for _, r := range taken {
			r.CancelAt(now)
		}
		for _, te := range batch {
			l.metrics.add(Key(te.Tenant), "emit", "limited", te.Events)
			l.meter.add(Key(te.Tenant), te.Events, false, now)
		}
		return refusal
	}
	for _, te := range batch {
		l.metrics.add(Key(te.Tenant), "emit", "accepted", te.Events)
		l.meter.add(Key(te.Tenant), te.Events, true, now)
	}
	return nil
}

// AcquireWatch counts a watch of principal against its quota and, when it
// names one tenant, against the tenant's; release, called once, ends it.
func (l *Limiter) AcquireWatch(principal string, tenant *authz.Tenant) (release func(), err error) {
	pl := l.Principal(principal)
	if !l.watchPrincipals.acquire(principal, pl.Watches) {
		l.refused(tenant, "watch")
		return nil, &QuotaError{Who: "principal " + principal, Limit: "watches", Max: pl.Watches}
	}
	if tenant == nil {
		return sync.OnceFunc(func() { l.watchPrincipals.release(principal) }), nil
	}
	key := Key(*tenant)
	tl := l.Tenant(*tenant)
	if !l.watchTenants.acquire(key, tl.Watches) {
		l.watchPrincipals.release(principal)
		l.refused(tenant, "watch")
		return nil, &QuotaError{Who: "tenant " + key, Limit: "watches", Max: tl.Watches}
	}
	l.metrics.add(key, "watch", "accepted", 1)
	return sync.OnceFunc(func() {
		l.watchTenants.release(key)
		l.watchPrincipals.release(principal)
	}), nil
}

// queryRetry is the wait a refused query is told: queries take
// milliseconds to seconds.
const queryRetry = time.Second

// AcquireQuery counts a query against its tenant's quota; a query over
// several tenants (tenant nil) counts against a quota of its principal's
// own with the default tenant limit. release, called once, ends it.
func (l *Limiter) AcquireQuery(principal string, tenant *authz.Tenant) (release func(), err error) {
	key, who, lim := "principal\x00"+principal, "principal "+principal+" (queries over several tenants)", l.tenants.def
	if tenant != nil {
		key = Key(*tenant)
		who, lim = "tenant "+key, l.Tenant(*tenant)
	}
	if !l.queries.acquire(key, lim.Queries) {
		l.refused(tenant, "query")
		return nil, &QuotaError{Who: who, Limit: "queries", Max: lim.Queries, RetryAfter: queryRetry}
	}
	if tenant != nil {
		l.metrics.add(key, "query", "accepted", 1)
	}
	return sync.OnceFunc(func() { l.queries.release(key) }), nil
}

func (l *Limiter) refused(tenant *authz.Tenant, kind string) {
	if tenant != nil {
		l.metrics.add(Key(*tenant), kind, "refused", 1)
	}
}

// buckets are token buckets by key. A bucket that has refilled is the same
// as a new one, so full buckets are dropped once there are many.
type buckets struct {
	mu      sync.Mutex
	m       map[string]*rate.Limiter
	sweepAt int
}

const minSweep = 1024

func (b *buckets) get(key string, r float64, burst int, now time.Time) *rate.Limiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if lim, ok := b.m[key]; ok {
		return lim
	}
	if b.m == nil {
		b.m = map[string]*rate.Limiter{}
	}
	if len(b.m) >= max(b.sweepAt, minSweep) {
		for k, lim := range b.m {
			if lim.TokensAt(now) >= float64(lim.Burst()) {
				delete(b.m, k)
			}
		}
		b.sweepAt = 2 * len(b.m)
	}
	lim := rate.NewLimiter(rate.Limit(r), burst)
	b.m[key] = lim
	return lim
}

// counters count what is in progress by key.
type counters struct {
	mu sync.Mutex
	m  map[string]int
}

// acquire counts one more for key unless max (0: no limit) are in progress.
func (c *counters) acquire(key string, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if max > 0 && c.m[key] >= max {
		return false
	}
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[key]++
	return true
}

func (c *counters) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] <= 1 {
		delete(c.m, key)
		return
	}
	c.m[key]--
}

// inProgress is the count for key.
func (c *counters) inProgress(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}
