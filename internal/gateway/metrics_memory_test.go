package gateway

import "testing"

// /metrics shows how much memory the embedded engine has in use, the part
// of the gateway's resident memory that is not the Go runtime's.
func TestMetricsShowTheEnginesMemory(t *testing.T) {
	tg := startGateway(t, nil)
	const name = "eventgate_clickhouse_engine_memory_bytes"
	if v := metricValue(t, tg.httpURL, name); !(v > 0) {
		t.Fatalf("%s = %v, want the engine's memory in use (> 0)", name, v)
	}
}
