package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventgate/eventgate/internal/clickhouse"
)

// engineCollector reads the embedded engine's memory in use (and what its
// merges, inserts and reads hold of it) and its tables' active parts at
// each scrape.
type engineCollector struct {
	store  *clickhouse.Store
	memory *prometheus.Desc
	byUse  *prometheus.Desc
	parts  *prometheus.Desc
}

func newEngineCollector(store *clickhouse.Store) *engineCollector {
	return &engineCollector{
		store: store,
		memory: prometheus.NewDesc("eventgate_clickhouse_engine_memory_bytes",
			"Memory the embedded engine's tracker counts in use (queries, inserts, merges, caches). "+
				"The process's resident memory is this, the Go runtime's (go_memstats_sys_bytes), the engine's code "+
				"and the freed pages its allocator has not returned yet.", nil, nil),
		byUse: prometheus.NewDesc("eventgate_clickhouse_engine_memory_use_bytes",
			"What the embedded engine's running merges, inserts (with their views) and reads hold "+
				"of eventgate_clickhouse_engine_memory_bytes at the scrape.", []string{"use"}, nil),
		parts: prometheus.NewDesc("eventgate_clickhouse_active_parts",
			"Active parts of each of the store's tables in the embedded engine: the engine merges each insert's parts "+
				"in the background, and parts that pile up slow every read.", []string{"table"}, nil),
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.memory
	ch <- c.byUse
	ch <- c.parts
}

// Collect leaves out what the engine does not answer within 2 s.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if m, err := c.store.EngineMemory(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.memory, prometheus.GaugeValue, float64(m.Tracked))
		ch <- prometheus.MustNewConstMetric(c.byUse, prometheus.GaugeValue, float64(m.Merges), "merges")
		ch <- prometheus.MustNewConstMetric(c.byUse, prometheus.GaugeValue, float64(m.Inserts), "inserts")
		ch <- prometheus.MustNewConstMetric(c.byUse, prometheus.GaugeValue, float64(m.Reads), "reads")
	}
	if parts, err := c.store.ActiveParts(ctx); err == nil {
		for table, n := range parts {
			ch <- prometheus.MustNewConstMetric(c.parts, prometheus.GaugeValue, float64(n), table)
		}
	}
}
