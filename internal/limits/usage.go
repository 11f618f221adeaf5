package limits

import (
	"sync"
	"time"

	"github.com/eventgate/eventgate/internal/authz"
)

// RateWindow is the window a tenant's emit rate is averaged over.
const RateWindow = 10 * time.Second

// Usage is what a replica's limiter knows of a tenant's load.
type Usage struct {
	// Limits are the tenant's.
	Limits Limits
	// Accepted and Limited are the events the tenant's Emit calls had
	// accepted and refused over a rate limit in the last RateWindow.
	Accepted, Limited int64
	// Rate is Accepted per second over RateWindow.
	Rate float64
	// BurstAvailable is the events the tenant's bucket would take now.
	BurstAvailable float64
	// Watches and Queries are the tenant's in progress.
	Watches, Queries int
}

// Usage reports tenant t's usage on this replica.
func (l *Limiter) Usage(t authz.Tenant) Usage {
	now := l.now()
	key, tl := Key(t), l.Tenant(t)
	u := Usage{Limits: tl, Watches: l.watchTenants.inProgress(key), Queries: l.queries.inProgress(key)}
	u.Accepted, u.Limited = l.meter.sums(key, now)
	u.Rate = float64(u.Accepted) / RateWindow.Seconds()
	if tl.EmitRate > 0 {
		u.BurstAvailable = float64(tl.EmitBurst)
		l.emitTenants.mu.Lock()
		if b, ok := l.emitTenants.m[key]; ok {
			u.BurstAvailable = max(0, b.TokensAt(now))
		}
		l.emitTenants.mu.Unlock()
	}
	return u
}

// meter counts events per tenant in one-second slots over RateWindow.
type meter struct {
	mu      sync.Mutex
	m       map[string]*slots
	sweepAt int
}

const numSlots = int(RateWindow / time.Second)

// slots are a tenant's counts: slot i holds the second sec[i].
type slots struct {
	sec               [numSlots]int64
	accepted, refused [numSlots]int64
}

// add counts n events of tenant key at now, accepted or limited.
func (m *meter) add(key string, n int, accepted bool, now time.Time) {
	sec := now.Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[key]
	if !ok {
		if m.m == nil {
			m.m = map[string]*slots{}
		}
		if len(m.m) >= max(m.sweepAt, minSweep) {
			m.sweep(sec)
		}
		s = &slots{}
		m.m[key] = s
	}
	i := int(sec % int64(numSlots))
	if s.sec[i] != sec {
		s.sec[i], s.accepted[i], s.refused[i] = sec, 0, 0
	}
	if accepted {
		s.accepted[i] += int64(n)
	} else {
		s.refused[i] += int64(n)
	}
}

// sums returns tenant key's accepted and limited events over the window
// ending at now.
func (m *meter) sums(key string, now time.Time) (accepted, limited int64) {
	sec := now.Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[key]
	if !ok {
		return 0, 0
	}
	for i := range numSlots {
		if sec-s.sec[i] < int64(numSlots) && s.sec[i] <= sec {
			accepted += s.accepted[i]
			limited += s.refused[i]
		}
	}
	return accepted, limited
}

// sweep drops the tenants that counted nothing in the window, so that the
// meter holds only the tenants active lately.
func (m *meter) sweep(sec int64) {
	for k, s := range m.m {
		idle := true
		for i := range numSlots {
			idle = idle && sec-s.sec[i] >= int64(numSlots)
		}
		if idle {
			delete(m.m, k)
		}
	}
	m.sweepAt = 2 * len(m.m)
}
