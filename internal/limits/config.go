// Package limits keeps one tenant's load from slowing the others: emit rate
// limits (token buckets per tenant and per principal), quotas of concurrent
// watches and queries, and the guardrails of a query (its default and
// largest time window, and what one statement may cost ClickHouse). Limits
// are kept by each gateway replica for the calls it serves, as
// kube-apiserver's EventRateLimit keeps them per server.
package limits

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
)

// Config is the `limits:` section of the configuration file:
//
//	limits:
//	  tenant: {emitRate: 50000, emitBurst: 100000, watches: 1000, queries: 16}
//	  principal: {emitRate: 100000, emitBurst: 200000, watches: 5000}
//	  tenants:
//	    project/shop: {emitRate: 50000, emitBurst: 100000, maxRowsToRead: 1000000000}
//	    user/*: {emitRate: 50, emitBurst: 100}
//	  principals:
//	    relay: {emitRate: 200000, emitBurst: 400000}
type Config struct {
	// Tenant is every tenant's limits, unless Tenants says otherwise.
	Tenant Limits `yaml:"tenant"`
	// Principal is every principal's limits (emitRate, emitBurst, watches),
	// unless Principals says otherwise.
	Principal Limits `yaml:"principal"`
	// Tenants overrides Tenant: the key is "type/name" (e.g.
	// "project/shop"), "type/*" for every tenant of a type, or "global"; a
	// "type/name" entry overrides "type/*" field by field.
	Tenants map[string]Override `yaml:"tenants"`
	// Principals overrides Principal by principal name.
	Principals map[string]Override `yaml:"principals"`
}

// Limits are the limits of one tenant or principal. Zero turns a limit off.
type Limits struct {
	// EmitRate is the events per second Emit accepts (a token bucket),
	// EmitBurst the most at once (at least the largest batch's events).
	EmitRate  float64 `yaml:"emitRate"`
	EmitBurst int     `yaml:"emitBurst"`
	// ObjectEmitRate and ObjectEmitBurst limit the events of one source
	// (reporting controller) about one object in a tenant, server-side, as
	// client-go's spam filter does per client (its defaults: 1 per 5
	// minutes, burst 25); off by default.
	ObjectEmitRate  float64 `yaml:"objectEmitRate"`
	ObjectEmitBurst int     `yaml:"objectEmitBurst"`
	// Watches bounds the concurrent watches.
	Watches int `yaml:"watches"`
	// Queries bounds a tenant's concurrent queries (Query, Get, analytics).
	Queries int `yaml:"queries"`
	// QueryWindow is the window a Query (or Timeline) with no since reads,
	// ending at until (or now); MaxQueryWindow bounds any window of Query
	// and analytics (until - since).
	QueryWindow    time.Duration `yaml:"queryWindow"`
	MaxQueryWindow time.Duration `yaml:"maxQueryWindow"`
	// MaxExecutionTime, MaxRowsToRead and MaxBytesToRead bound one
	// ClickHouse statement of a query (the engine's settings of these
	// names, overflow mode throw): a statement over them fails, naming the
	// limit.
	MaxExecutionTime time.Duration `yaml:"maxExecutionTime"`
	MaxRowsToRead    int64         `yaml:"maxRowsToRead"`
	MaxBytesToRead   int64         `yaml:"maxBytesToRead"`
}

// Override changes some limits of a tenant or principal; absent fields keep
// the limits it overrides.
type Override struct {
	EmitRate         *float64       `yaml:"emitRate"`
	EmitBurst        *int           `yaml:"emitBurst"`
	ObjectEmitRate   *float64       `yaml:"objectEmitRate"`
	ObjectEmitBurst  *int           `yaml:"objectEmitBurst"`
	Watches          *int           `yaml:"watches"`
	Queries          *int           `yaml:"queries"`
	QueryWindow      *time.Duration `yaml:"queryWindow"`
	MaxQueryWindow   *time.Duration `yaml:"maxQueryWindow"`
	MaxExecutionTime *time.Duration `yaml:"maxExecutionTime"`
	MaxRowsToRead    *int64         `yaml:"maxRowsToRead"`
	MaxBytesToRead   *int64         `yaml:"maxBytesToRead"`
}

// apply returns l with o's fields.
func (o Override) apply(l Limits) Limits {
	if o.EmitRate != nil {
		l.EmitRate = *o.EmitRate
	}
	if o.EmitBurst != nil {
		l.EmitBurst = *o.EmitBurst
	}
	if o.ObjectEmitRate != nil {
		l.ObjectEmitRate = *o.ObjectEmitRate
	}
	if o.ObjectEmitBurst != nil {
		l.ObjectEmitBurst = *o.ObjectEmitBurst
	}
	if o.Watches != nil {
		l.Watches = *o.Watches
	}
	if o.Queries != nil {
		l.Queries = *o.Queries
	}
	if o.QueryWindow != nil {
		l.QueryWindow = *o.QueryWindow
	}
	if o.MaxQueryWindow != nil {
		l.MaxQueryWindow = *o.MaxQueryWindow
	}
	if o.MaxExecutionTime != nil {
		l.MaxExecutionTime = *o.MaxExecutionTime
	}
	if o.MaxRowsToRead != nil {
		l.MaxRowsToRead = *o.MaxRowsToRead
	}
	if o.MaxBytesToRead != nil {
		l.MaxBytesToRead = *o.MaxBytesToRead
	}
	return l
}

// Defaults. A tenant may emit 50,000 events/s (bursts of 100,000), a
// principal, which may write to many tenants, 100,000/s: above what one
// gateway on a small machine takes in all, so that a single-tenant
// installation is never throttled by default, while a runaway client of a
// larger cluster is; operators lower them for tenants that share a
// gateway. A query without since reads the last
// 7 days; no window is longer than 31 days (as analytics), and one
// statement stops after 30 s, 1 billion rows or 100 GiB read.
func DefaultConfig() Config {
	return Config{
		Tenant: Limits{
			EmitRate: 50_000, EmitBurst: 100_000, Watches: 1000, Queries: 16,
			QueryWindow: 7 * 24 * time.Hour, MaxQueryWindow: 31 * 24 * time.Hour,
			MaxExecutionTime: 30 * time.Second, MaxRowsToRead: 1_000_000_000, MaxBytesToRead: 100 << 30,
		},
		Principal: Limits{EmitRate: 100_000, EmitBurst: 200_000, Watches: 5000},
	}
}

// Validate checks the configuration; maxBatch is the most events of one
// batch, which a burst must hold.
func (c Config) Validate(maxBatch int) error {
	var errs []error
	check := func(where string, l Limits, principal bool) {
		switch {
		case l.EmitRate < 0 || l.EmitBurst < 0 || l.ObjectEmitRate < 0 || l.ObjectEmitBurst < 0 || l.Watches < 0 || l.Queries < 0 || l.QueryWindow < 0 ||
			l.MaxQueryWindow < 0 || l.MaxExecutionTime < 0 || l.MaxRowsToRead < 0 || l.MaxBytesToRead < 0:
			errs = append(errs, fmt.Errorf("limits %s: limits must not be negative (0 turns one off)", where))
		case l.EmitRate > 0 && l.EmitBurst < maxBatch:
			errs = append(errs, fmt.Errorf("limits %s: emitBurst %d is less than a batch can hold (max-batch %d): such a batch could never be accepted", where, l.EmitBurst, maxBatch))
		case l.ObjectEmitRate > 0 && l.ObjectEmitBurst < 1:
			errs = append(errs, fmt.Errorf("limits %s: objectEmitBurst must be at least 1 with an objectEmitRate", where))
		case l.MaxQueryWindow > 0 && l.QueryWindow > l.MaxQueryWindow:
			errs = append(errs, fmt.Errorf("limits %s: queryWindow %s is longer than maxQueryWindow %s", where, l.QueryWindow, l.MaxQueryWindow))
		case principal && (l.ObjectEmitRate != 0 || l.Queries != 0 || l.QueryWindow != 0 || l.MaxQueryWindow != 0 || l.MaxExecutionTime != 0 || l.MaxRowsToRead != 0 || l.MaxBytesToRead != 0):
			errs = append(errs, fmt.Errorf("limits %s: a principal has emitRate, emitBurst and watches only (query limits are per tenant)", where))
		}
	}
	check("tenant", c.Tenant, false)
	check("principal", c.Principal, true)
	if _, err := newTable(c.Tenant, c.Tenants); err != nil {
		errs = append(errs, err)
	} else {
		for k, o := range c.Tenants {
			t, _ := parseTenantKey(k)
			base := c.Tenant
			if t.Name != "*" {
				if bo, ok := c.Tenants[t.Type+"/*"]; ok {
					base = bo.apply(base)
				}
			}
			check(fmt.Sprintf("tenants[%q]", k), o.apply(base), false)
		}
	}
	for name, o := range c.Principals {
		if name == "" {
			errs = append(errs, errors.New("limits principals: empty principal name"))
			continue
		}
		check(fmt.Sprintf("principals[%q]", name), o.apply(c.Principal), true)
	}
	return errors.Join(errs...)
}

// Key names a tenant as the configuration does: "type/name", or "global".
func Key(t authz.Tenant) string {
	if t.Type == event.TenantGlobal {
		return event.TenantGlobal
	}
	return t.Type + "/" + t.Name
}

// parseTenantKey reads "type/name", "type/*" or "global".
func parseTenantKey(k string) (authz.Tenant, error) {
	typ, name, _ := strings.Cut(k, "/")
	switch {
	case typ == event.TenantGlobal && (name == "" || name == "_"):
		return authz.Tenant{Type: event.TenantGlobal}, nil
	case typ == event.TenantGlobal || !slices.Contains(event.TenantTypes, typ):
		return authz.Tenant{}, fmt.Errorf("limits tenants key %q: want \"type/name\", \"type/*\" or \"global\" (types: %s)", k, strings.Join(event.TenantTypes, ", "))
	case name == "":
		return authz.Tenant{}, fmt.Errorf("limits tenants key %q: want \"type/name\", \"type/*\" or \"global\"", k)
	}
	return authz.Tenant{Type: typ, Name: name}, nil
}

// table resolves a tenant's limits.
type table struct {
	def    Limits
	exact  map[string]Limits // Key
	byType map[string]Limits // type
}

func newTable(def Limits, m map[string]Override) (*table, error) {
	t := &table{def: def, exact: map[string]Limits{}, byType: map[string]Limits{}}
	var errs []error
	parsed := map[string]authz.Tenant{}
	for k := range m {
		tn, err := parseTenantKey(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		parsed[k] = tn
		if tn.Name == "*" {
			t.byType[tn.Type] = m[k].apply(def)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for k, tn := range parsed {
		if tn.Name == "*" {
			continue
		}
		base, ok := t.byType[tn.Type]
		if !ok {
			base = def
		}
		t.exact[Key(tn)] = m[k].apply(base)
	}
	return t, nil
}

func (t *table) lookup(tn authz.Tenant) Limits {
	if l, ok := t.exact[Key(tn)]; ok {
		return l
	}
	if l, ok := t.byType[tn.Type]; ok {
		return l
	}
	return t.def
}
