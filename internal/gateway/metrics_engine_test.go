package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// /metrics shows how much memory the embedded engine has in use, the part
// of the gateway's resident memory that is not the Go runtime's, and what
// its merges, inserts and reads hold of it.
func TestMetricsShowTheEnginesMemory(t *testing.T) {
	tg := startGateway(t, nil)
	const name = "eventgate_clickhouse_engine_memory_bytes"
	if v := metricValue(t, tg.httpURL, name); !(v > 0) {
		t.Fatalf("%s = %v, want the engine's memory in use (> 0)", name, v)
	}
	for _, use := range []string{"merges", "inserts", "reads"} {
		name := `eventgate_clickhouse_engine_memory_use_bytes{use="` + use + `"}`
		if v := metricValue(t, tg.httpURL, name); !(v >= 0) {
			t.Errorf("%s = %v, want the bytes it holds (≥ 0)", name, v)
		}
	}
}

// /metrics counts the active parts of each table of the embedded engine:
// an event, once stored, is in a part of the events table.
func TestMetricsCountTheEnginesActiveParts(t *testing.T) {
	tg := startGateway(t, nil)
	emit(t, tg.client, testEvent("Parted", "Job", "ns", "parts"))
	const name = `eventgate_clickhouse_active_parts{table="events"}`
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, body := restGet(t, tg.httpURL+"/metrics", "")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		for line := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 1 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not at least 1 within 30 s of an emit", name)
		}
		time.Sleep(20 * time.Millisecond) // the poll's interval: ingest is asynchronous
	}
}
