package gateway

import (
	"runtime"
	"testing"
)

// /metrics counts the processor time the Go collector takes (the runtime's
// CPU classes), so an operator can weigh the soft memory limit against it:
// a collection (this test shares the gateway's process) adds to it, and it
// is part of the process's total.
func TestMetricsCountTheCollectorsCPU(t *testing.T) {
	tg := startGateway(t, nil)
	const gc, total = "go_cpu_classes_gc_total_cpu_seconds_total", "go_cpu_classes_total_cpu_seconds_total"
	before := metricValue(t, tg.httpURL, gc)
	for range 3 {
		runtime.GC()
	}
	after := metricValue(t, tg.httpURL, gc)
	if after <= before {
		t.Fatalf("%s: %v before three collections, %v after; want more", gc, before, after)
	}
	if all := metricValue(t, tg.httpURL, total); after > all {
		t.Fatalf("%s %v exceeds %s %v", gc, after, total, all)
	}
}
