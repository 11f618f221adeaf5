package series

import (
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// TestTenantKeys: a tenant's tracked keys are its singletons and ongoing
// series, followed through a series' start and finish, apart from another
// tenant's.
func TestTenantKeys(t *testing.T) {
	cfg := Config{Window: 6 * time.Minute, FlushInterval: 30 * time.Second, Heartbeat: 2 * time.Minute, FinishAfter: 3 * time.Minute}
	a := mustNew(t, cfg)
	log := newLog()
	observe := func(d time.Duration, ev *eventgatev1.Event) {
		at, pos := log.next(d)
		must(a.Observe(ev, at, pos))
	}
	onPod := func(name string) func(*eventgatev1.Event) {
		return func(ev *eventgatev1.Event) { ev.Regarding.Name = name }
	}
	inP2 := func(ev *eventgatev1.Event) { ev.Tenant = &eventgatev1.Tenant{Type: "project", Name: "p2"} }
	check := func(what string, wantKeys, wantSeries int) {
		t.Helper()
		if keys, series := a.TenantKeys("project", "p1"); keys != wantKeys || series != wantSeries {
			t.Errorf("%s: p1 tracks %d keys, %d series; want %d, %d", what, keys, series, wantKeys, wantSeries)
		}
	}

	observe(0, mkEvent("u1", onPod("a")))
	observe(time.Second, mkEvent("u2", onPod("b")))
	observe(time.Second, mkEvent("u3", onPod("c"), inP2))
	check("three singletons, one of p2", 2, 0)
	observe(time.Second, mkEvent("u4", onPod("a")))
	check("a series started", 2, 1)
	if keys, series := a.TenantKeys("project", "p2"); keys != 1 || series != 0 {
		t.Errorf("p2 tracks %d keys, %d series; want 1 singleton", keys, series)
	}
	// Past the window and FinishAfter: singletons forgotten, series finished.
	at, pos := log.next(10 * time.Minute)
	a.Tick(at, pos)
	check("after finish", 0, 0)
}
