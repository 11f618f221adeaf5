package clickhouse

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/event"
)

// Config says which ClickHouse to use and how events are kept in it.
type Config struct {
	// DSN of a ClickHouse server or cluster for clickhouse-go/v2, e.g.
	// clickhouse://user:pass@host:9440/?secure=true (native protocol, TLS)
	// or http://host:8123 (HTTP protocol). Empty uses the embedded chDB engine.
	DSN string `yaml:"dsn"`
	// ChDBLib is the path of libchdb.so; empty means chdb.DefaultLibPath().
	ChDBLib string `yaml:"chdbLib"`
	// DataDir is the embedded engine's data directory (the gateway passes
	// <data-dir>/clickhouse). Empty means an in-memory engine.
	DataDir string `yaml:"dataDir"`
	// PoolSize is the number of connections (embedded engine) or the
	// maximum of open connections (server); 0 means 4 / 8.
	PoolSize int `yaml:"poolSize"`
	// Database holds the tables (default "eventgate"). It is an identifier:
	// letters, digits and underscores, not starting with a digit.
	Database string `yaml:"database"`
	// Cluster, when set, runs DDL ON CLUSTER and creates Replicated tables.
	Cluster string `yaml:"cluster"`
	// TTL is how long events are kept after their last observation
	// (default 90 days).
	TTL time.Duration `yaml:"ttl"`
	// TenantTTL overrides TTL per tenant: the key is "type/name" (e.g.
	// "project/acme"), "type/*" for every tenant of a type, or "global" for
	// the global tenant. The TTL is computed per row at insert, so a change
	// applies to events stored from then on.
	TenantTTL map[string]time.Duration `yaml:"tenantTTL"`
	// BatchSize and BatchWait are the ingest thresholds: a batch is inserted
	// once it holds BatchSize events, or after BatchWait with what it has.
	BatchSize int           `yaml:"batchSize"`
	BatchWait time.Duration `yaml:"batchWait"`
	// IngestNice is the Linux nice value (0..19; 0 = off, default 10 in
	// DefaultConfig) of the embedded engine's ingest, so that the serving
	// path gets the CPU first when it is saturated: the thread on which the
	// ingest consumer builds and encodes its batches, the engine's threads
	// while they run an insert (chdb.Options.InsertNice) and its background
	// threads, merges first (chdb.Options.BackgroundNice). Queries keep the
	// normal priority. Ignored with a DSN: the server does the work there.
	IngestNice int `yaml:"ingestNice"`
	// BackgroundIdle runs the embedded engine's background threads (merges
	// first) under Linux's SCHED_IDLE policy rather than at IngestNice:
	// they get the CPU only when nothing else of the machine wants it, and
	// a thread that wakes takes it from them at once (default true in
	// DefaultConfig). Ignored with a DSN.
	BackgroundIdle bool `yaml:"backgroundIdle"`
	// MergeThreads is how many merges the embedded engine runs at once
	// (chdb.Options.MergeThreads): 0 means one for every two CPUs, at
	// least one; -1 the engine's own (up to four). Each merge holds its
	// own buffers: with one at a time on 2 CPUs the write phase's peak
	// resident memory was 60–90 MiB lower, at the same throughput
	// (BENCHMARKS.md, session 63). Ignored with a DSN.
	MergeThreads int `yaml:"mergeThreads"`
	// RollupInterval is how often closed hours are rolled up for analytics
	// (rollup.go; default 1 minute in DefaultConfig, 0 = never: analytics
	// then read the per-minute tables only).
	RollupInterval time.Duration `yaml:"rollupInterval"`
	// SlowRead, when above 0, logs every read that takes at least this
	// long, with what the embedded engine reports of it (default 1 s in
	// DefaultConfig; slowreads.go).
	SlowRead time.Duration `yaml:"slowRead"`
}

// Defaults. An INSERT has a fixed cost of a few milliseconds (BenchmarkInsert,
// ~600-byte events of 1,000 tenants, 2 cores: batches of 100 / 1k / 5k /
// 10k / 20k rows insert 18k / 61k / 95k / 89k / 92k rows/s), and each one
// writes a part to the events table and to each table its materialized
// views feed (six, of 10-11 files each), which the engine then merges: the
// fewer and larger the parts, the less it merges per event. BatchWait bounds
// the latency at low rates, and how many inserts a second the engine takes:
// at 7,200 events/s (`bench -only latency -latency-rate 7200`, quiet
// machine) 500 ms took the engine's CPU per 1,000 events from 51 to 36 ms
// against 200 ms, with emit->queryable p99 679 ms against 336 ms and the
// emit tails no worse. Below BatchSize events per BatchWait (the latency
// phase's 9,200 events/s) every batch is BatchWait's; BatchSize only
// decides under a heavier load. There, batches of 20,000 rather than 5,000
// (an insert every 500 ms rather than four or five a second at 20,000+
// events/s) took the engine's CPU per 1,000 events in the write phase from
// 37-40 to 24-27 ms, run after run (session 28, `bench -only emit`, the
// two alternating).
const (
	DefaultDatabase   = "eventgate"
	DefaultTTL        = 90 * 24 * time.Hour
	DefaultBatchSize  = 20000
	DefaultBatchWait  = 500 * time.Millisecond
	DefaultIngestNice = 10
	// DefaultRollupInterval: a closed hour is read from its rollup about
	// rollupMargin + 1 minute after its last write.
	DefaultRollupInterval = time.Minute
	// DefaultSlowRead: no read the gateway's own requests make should take
	// this long (the dashboards' targets are 50-250 ms).
	DefaultSlowRead = time.Second
)

// mergeThreads resolves Config.MergeThreads for chdb.Options: one for
// every two of cpus (the CPUs the process may use: GOMAXPROCS, which
// follows a container's limit), at least one, when n is 0; 0 (the engine's own) when
// n is -1.
func mergeThreads(n, cpus int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return max(1, cpus/2)
	}
	return n
}

// DefaultConfig returns the defaults: embedded engine, database eventgate,
// 90 days.
func DefaultConfig() Config {
	return Config{
		Database:       DefaultDatabase,
		TTL:            DefaultTTL,
		BatchSize:      DefaultBatchSize,
		BatchWait:      DefaultBatchWait,
		IngestNice:     DefaultIngestNice,
		BackgroundIdle: true,

		RollupInterval: DefaultRollupInterval,
		SlowRead:       DefaultSlowRead,
	}
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// maxTTL is the largest TTL a row can carry (ttl_seconds is a UInt32).
const maxTTL = time.Duration(math.MaxUint32) * time.Second

func (c *Config) withDefaults() {
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchWait <= 0 {
		c.BatchWait = DefaultBatchWait
	}
}

// Validate checks the configuration (after defaults are applied for zero
// values).
func (c Config) Validate() error {
	c.withDefaults()
	var errs []error
	if !identRe.MatchString(c.Database) {
		errs = append(errs, fmt.Errorf("clickhouse database %q must be an identifier ([A-Za-z_][A-Za-z0-9_]*)", c.Database))
	}
	if c.Cluster != "" && !identRe.MatchString(c.Cluster) {
		errs = append(errs, fmt.Errorf("clickhouse cluster %q must be an identifier ([A-Za-z_][A-Za-z0-9_]*)", c.Cluster))
	}
	if c.TTL < time.Second || c.TTL > maxTTL {
		errs = append(errs, fmt.Errorf("clickhouse ttl must be between 1s and %v, got %v", maxTTL, c.TTL))
	}
	if _, err := newTTLTable(c.TTL, c.TenantTTL); err != nil {
		errs = append(errs, err)
	}
	if c.BatchSize > 1_000_000 {
		errs = append(errs, fmt.Errorf("clickhouse batch size must be at most 1000000, got %d", c.BatchSize))
	}
	if c.IngestNice < 0 || c.IngestNice > 19 {
		errs = append(errs, fmt.Errorf("clickhouse ingest nice value must be between 0 (off) and 19, got %d", c.IngestNice))
	}
	if c.MergeThreads < -1 {
		errs = append(errs, fmt.Errorf("clickhouse merge threads must be -1 (the engine's own), 0 (one for every two CPUs) or a count, got %d", c.MergeThreads))
	}
	if c.RollupInterval < 0 {
		errs = append(errs, fmt.Errorf("clickhouse rollup interval must be 0 (off) or positive, got %v", c.RollupInterval))
	}
	return errors.Join(errs...)
}

// ttlTable resolves a tenant's TTL in seconds.
type ttlTable struct {
	def    uint32
	exact  map[string]uint32 // "type/name"
	byType map[string]uint32 // "type"
}

func newTTLTable(def time.Duration, m map[string]time.Duration) (*ttlTable, error) {
	t := &ttlTable{def: ttlSeconds(def), exact: map[string]uint32{}, byType: map[string]uint32{}}
	for k, d := range m {
		if d < time.Second || d > maxTTL {
			return nil, fmt.Errorf("clickhouse tenant ttl %q must be between 1s and %v, got %v", k, maxTTL, d)
		}
		typ, name, hasName := strings.Cut(k, "/")
		switch {
		case typ == event.TenantGlobal && (!hasName || name == "" || name == "*" || name == "_"):
			t.exact[event.TenantGlobal+"/"] = ttlSeconds(d)
		case !validTenantType(typ):
			return nil, fmt.Errorf("clickhouse tenant ttl key %q: tenant type must be one of %s", k, strings.Join(event.TenantTypes, ", "))
		case !hasName || name == "*":
			t.byType[typ] = ttlSeconds(d)
		case name == "":
			return nil, fmt.Errorf("clickhouse tenant ttl key %q: want type/name, type/* or global", k)
		default:
			t.exact[typ+"/"+name] = ttlSeconds(d)
		}
	}
	return t, nil
}

func validTenantType(t string) bool {
	for _, v := range event.TenantTypes {
		if v == t {
			return true
		}
	}
	return false
}

func ttlSeconds(d time.Duration) uint32 {
	s := (d + time.Second - 1) / time.Second
	if s > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(s)
}

func (t *ttlTable) lookup(typ, name string) uint32 {
	if len(t.exact) > 0 {
		if v, ok := t.exact[typ+"/"+name]; ok {
			return v
		}
	}
	if v, ok := t.byType[typ]; ok {
		return v
	}
	return t.def
}
