package limits

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count what the limits accepted, limited (emit: events over a
// rate limit) and refused (watches and queries over a quota), by tenant.
// The tenant label is bounded: a tenant gets a label of its own once it has
// sent promoteAfter events or calls while labels are left (maxTenantLabels,
// kept until the gateway restarts); everything else, including a tenant's
// counts before it got its label, is summed under "other", so every series
// only grows.
type Metrics struct {
	requests *prometheus.CounterVec

	mu       sync.Mutex
	labelled map[string]bool
	pending  map[string]int
}

const (
	maxTenantLabels = 20
	promoteAfter    = 100
	maxPending      = 10_000
	// OtherTenants is the tenant label of the tenants summed together (no
	// tenant key has this form).
	OtherTenants = "other"
)

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventgate_tenant_requests_total",
			Help: "Emitted events, watches and queries by tenant (the busiest tenants, the rest as \"other\"), kind (emit, watch, query) and outcome: accepted, limited (over an emit rate limit) or refused (over a watch or query quota).",
		}, []string{"tenant", "kind", "outcome"}),
		labelled: map[string]bool{},
		pending:  map[string]int{},
	}
	if reg != nil {
		reg.MustRegister(m.requests)
	}
	return m
}

func (m *Metrics) add(tenant, kind, outcome string, n int) {
	m.requests.WithLabelValues(m.label(tenant, n), kind, outcome).Add(float64(n))
}

// label is the tenant label for n more of tenant's requests.
func (m *Metrics) label(tenant string, n int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.labelled[tenant] {
		return tenant
	}
	if len(m.labelled) >= maxTenantLabels {
		return OtherTenants
	}
	if m.pending[tenant]+n >= promoteAfter {
		delete(m.pending, tenant)
		m.labelled[tenant] = true
		return tenant
	}
	if len(m.pending) >= maxPending {
		clear(m.pending) // many light tenants: start counting afresh
	}
	m.pending[tenant] += n
	return OtherTenants
}
