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

// /metrics shows the heap the last collection found live (heap in use also
// counts what has died since): memory the process keeps reachable is in
// it after a collection, and leaves it after the next once unreachable.
func TestMetricsShowTheLiveHeap(t *testing.T) {
	tg := startGateway(t, nil)
	const live, held = "go_gc_heap_live_bytes", 64 << 20
	keep := make([]byte, held)
	for i := range keep {
		keep[i] = byte(i)
	}
	runtime.GC()
	with := metricValue(t, tg.httpURL, live)
	if with < held {
		t.Fatalf("%s = %.0f with %d bytes reachable, want at least that", live, with, held)
	}
	runtime.KeepAlive(keep) // its last use: the next collection finds it dead
	runtime.GC()
	if without := metricValue(t, tg.httpURL, live); with-without < held*3/4 {
		t.Fatalf("%s: %.0f with %d bytes reachable, %.0f after they were not; want it lower by about as much", live, with, held, without)
	}
	if goal := metricValue(t, tg.httpURL, "go_gc_heap_goal_bytes"); !(goal > 0) {
		t.Fatalf("go_gc_heap_goal_bytes = %v, want the next collection's goal", goal)
	}
}
