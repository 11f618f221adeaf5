// Package config is the gateway's typed configuration: defaults, overridden
// by an optional YAML file, then by EVENTGATE_* environment variables, then
// by command-line flags.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/ingest"
	"github.com/eventgate/eventgate/internal/intake"
	"github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/k8sapi"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/notify"
	"github.com/eventgate/eventgate/internal/rules"
	"github.com/eventgate/eventgate/internal/watch"
	"github.com/eventgate/eventgate/internal/webhook"
)

// EnvPrefix prefixes every environment variable the gateway reads.
const EnvPrefix = "EVENTGATE_"

// Config is everything the gateway can be told.
type Config struct {
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string `yaml:"grpcAddr"`
	// HTTPAddr is the REST, health and metrics listen address.
	HTTPAddr string `yaml:"httpAddr"`
	// CORSAllowedOrigins are the origins (scheme://host[:port], one "*"
	// wildcard allowed in the host, or "*" for any) whose browser pages may
	// call the REST API; empty (the default) allows none, as kube-apiserver.
	CORSAllowedOrigins []string `yaml:"corsAllowedOrigins"`
	// DebugAddr, when set, serves Go's pprof profiles (/debug/pprof/) on a
	// loopback address of its own; empty (the default) serves none.
	DebugAddr string `yaml:"debugAddr"`
	// DataDir holds the embedded engines' data.
	DataDir string `yaml:"dataDir"`
	// ReplicaID names this gateway replica (logs, metrics, /readyz) and
	// what it keeps on the NATS servers (its watch feed, its intake
	// membership). Empty: the id generated once and kept in DataDir.
	ReplicaID string `yaml:"replicaID"`
	// NATS says where JetStream is and how the stream is kept.
	NATS jetstream.Config `yaml:"nats"`
	// Series turns on server-side event series (the KEP's dedup), done in
	// the intake: every occurrence is logged durably, then aggregated by the
	// replica that owns its partition.
	Series bool `yaml:"series"`
	// Intake tunes the intake log and the series aggregation.
	Intake intake.Config `yaml:"intake"`
	// Rules tunes the evaluation of rules; Notify, the delivery of their
	// notifications.
	Rules  rules.Config  `yaml:"rules"`
	Notify notify.Config `yaml:"notify"`
	// Auth configures authentication; nothing configured means loopback only.
	Auth authz.Config `yaml:"auth"`
	// TLS serves gRPC and HTTP over TLS when both files are set.
	TLS TLSConfig `yaml:"tls"`
	// ClickHouse says where events are kept for queries.
	ClickHouse clickhouse.Config `yaml:"clickhouse"`
	// Ingest tunes the copy of the events stream into ClickHouse.
	Ingest ingest.Config `yaml:"ingest"`
	// ReadyMaxIngestLag: the gateway is not ready while the oldest event not
	// yet in its store is older than this.
	ReadyMaxIngestLag time.Duration `yaml:"readyMaxIngestLag"`
	// Events bounds what an event may carry.
	Events event.Limits `yaml:"events"`
	// MaxBatch bounds the events of one Emit call or EmitStream batch.
	MaxBatch int `yaml:"maxBatch"`
	// MaxRequestBytes bounds a request's size; larger ones are refused before decoding.
	MaxRequestBytes int `yaml:"maxRequestBytes"`
	// WatchBuffer bounds the events queued for one watcher before it is ended as too slow.
	WatchBuffer int `yaml:"watchBuffer"`
	// WatchReplayIdle is how long a catch-up watch (from a past
	// resourceVersion) whose client does not read keeps its consumer on the
	// NATS server; then the server deletes it, and the catch-up makes a new
	// one where it was when the client reads again.
	WatchReplayIdle time.Duration `yaml:"watchReplayIdle"`
	// GCPercent is the garbage collector's target (GOGC) of the gateway
	// binary: the heap may grow this many percent over the live heap
	// between collections. The environment variable GOGC overrides it.
	GCPercent int `yaml:"gcPercent"`
	// MemoryLimitMiB is the soft memory limit of the Go heap (GOMEMLIMIT),
	// under which the collector works harder instead of growing: 0 means a
	// quarter of the memory available (the cgroup's limit, else the
	// machine's; the embedded chDB needs its own), at most 1 GiB; -1 none. The environment
	// variable GOMEMLIMIT overrides it.
	MemoryLimitMiB int64 `yaml:"memoryLimitMiB"`
	// MemoryBudgetMiB is the resident memory the whole process keeps
	// under, the embedded engine included: the Go memory limit is lowered
	// by what the process holds outside Go's runtime, down to half of
	// MemoryLimitMiB's. 0 means the Go limit plus 512 MiB with the embedded
	// engine and none with a shared ClickHouse; -1 none. Not followed when
	// the GOMEMLIMIT variable sets the Go limit.
	MemoryBudgetMiB int64 `yaml:"memoryBudgetMiB"`
	// ShutdownTimeout bounds a graceful shutdown.
	ShutdownTimeout time.Duration `yaml:"shutdownTimeout"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"logLevel"`
	// LogFormat is text or json.
	LogFormat string `yaml:"logFormat"`
	// OTLPEndpoint, when set, exports traces over OTLP/gRPC to it (host:port).
	OTLPEndpoint string `yaml:"otlpEndpoint"`
	// Flux configures the Flux event endpoint (POST /webhook/flux): per-tenant
	// metadata, in the config file only.
	Flux webhook.FluxConfig `yaml:"flux"`
	// K8sCoreCorrelate groups similar core/v1 events on the core/v1 create
	// path as client-go's EventCorrelator does (internal/correlator).
	K8sCoreCorrelate bool `yaml:"k8sCoreCorrelate"`
	// K8s tunes the Kubernetes Events API (/api, /apis: internal/k8sapi).
	K8s k8sapi.Config `yaml:"k8s"`
	// Limits are the per-tenant and per-principal emit rate limits, watch
	// and query quotas and query guardrails (per-tenant overrides in the
	// config file only).
	Limits limits.Config `yaml:"limits"`
}

// TLSConfig names the server certificate.
type TLSConfig struct {
	CertFile string `yaml:"certFile"`
	KeyFile  string `yaml:"keyFile"`
}

// Enabled reports whether TLS is configured.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" && t.KeyFile != "" }

// Default returns the embedded defaults.
func Default() Config {
	return Config{
		GRPCAddr:          ":9090",
		HTTPAddr:          ":8080",
		DataDir:           "./data",
		NATS:              jetstream.DefaultConfig(),
		ClickHouse:        clickhouse.DefaultConfig(),
		ReadyMaxIngestLag: time.Minute,
		Series:            true,
		Intake:            intake.DefaultConfig(),
		Rules:             rules.DefaultConfig(),
		Notify:            notify.DefaultConfig(),
		Events:            event.DefaultLimits(),
		MaxBatch:          1000,
		MaxRequestBytes:   4 << 20,
		WatchBuffer:       4096,
		WatchReplayIdle:   watch.DefaultReplayIdle,
		GCPercent:         400,
		ShutdownTimeout:   15 * time.Second,
		LogLevel:          "info",
		LogFormat:         "text",
		K8s:               k8sapi.DefaultConfig(),
		Limits:            limits.DefaultConfig(),
	}
}

// Validate checks a configuration.
func (c Config) Validate() error {
	var errs []error
	if c.GRPCAddr == "" || c.HTTPAddr == "" {
		errs = append(errs, errors.New("grpc-addr and http-addr are required"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data-dir is required"))
	}
	if c.ReplicaID != "" {
		if err := ingest.ValidateReplicaID(c.ReplicaID); err != nil {
			errs = append(errs, fmt.Errorf("replica-id: %w", err))
		}
	}
	if c.Ingest.ConsumerTTL < 0 {
		errs = append(errs, fmt.Errorf("ingest-consumer-ttl must not be negative, got %v", c.Ingest.ConsumerTTL))
	}
	if c.GCPercent < 1 {
		errs = append(errs, fmt.Errorf("gc-percent must be at least 1, got %d", c.GCPercent))
	}
	if c.MemoryLimitMiB < -1 {
		errs = append(errs, fmt.Errorf("memory-limit-mib must be -1, 0 or a size, got %d", c.MemoryLimitMiB))
	}
	if c.MemoryBudgetMiB < -1 {
		errs = append(errs, fmt.Errorf("memory-budget-mib must be -1, 0 or a size, got %d", c.MemoryBudgetMiB))
	}
	if c.NATS.Stream == "" || strings.ContainsAny(c.NATS.Stream, ".*> \t") {
		errs = append(errs, fmt.Errorf("stream name %q is not a valid JetStream stream name", c.NATS.Stream))
	}
	if c.NATS.MaxStore < 0 {
		errs = append(errs, fmt.Errorf("nats-max-store must be 0 (75%% of the free disk) or a number of bytes, got %d", c.NATS.MaxStore))
	} else if c.NATS.MaxStore > 0 && c.NATS.URL != "" {
		errs = append(errs, fmt.Errorf("nats-max-store bounds the embedded server's store; with --nats-url the server's own configuration does"))
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		errs = append(errs, fmt.Errorf("stream-replicas must be 1..5, got %d", c.NATS.Replicas))
	}
	if err := c.Events.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Series {
		if err := c.Intake.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("intake: %w", err))
		}
	}
	if err := c.ClickHouse.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("clickhouse: %w", err))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("max-batch must be positive, got %d", c.MaxBatch))
	}
	if c.MaxRequestBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("max-request-bytes must be at least 1024, got %d", c.MaxRequestBytes))
	}
	if c.WatchBuffer < 1 {
		errs = append(errs, fmt.Errorf("watch-buffer must be positive, got %d", c.WatchBuffer))
	}
	if c.WatchReplayIdle < time.Second {
		errs = append(errs, fmt.Errorf("watch-replay-idle must be at least 1s, got %v", c.WatchReplayIdle))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, errors.New("tls-cert-file and tls-key-file go together"))
	}
	if err := c.Flux.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.K8s.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Limits.Validate(c.MaxBatch); err != nil {
		errs = append(errs, err)
	}
	if c.Auth.MTLS.CAFile != "" && !c.TLS.Enabled() {
		errs = append(errs, errors.New("auth-mtls-ca-file needs tls-cert-file and tls-key-file"))
	}
	for _, o := range c.CORSAllowedOrigins {
		if err := checkOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("cors-allowed-origins: %w", err))
		}
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log-format must be text or json, got %q", c.LogFormat))
	}
	return errors.Join(errs...)
}

// checkOrigin accepts "*" and a browser origin, scheme://host[:port] with
// at most one "*" in the host.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(strings.Replace(o, "*", "wildcard", 1))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.Count(o, "*") > 1 {
		return fmt.Errorf("%q is not an origin (scheme://host[:port], e.g. https://dash.example.com)", o)
	}
	return nil
}

type listValue struct{ p *[]string }

func (l listValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listValue) Set(s string) error {
	*l.p = nil
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l.p = append(*l.p, v)
		}
	}
	return nil
}

// flags binds every setting of c to a flag. It is a flat list on purpose,
// one line a flag: split by section, a reader looking for a flag would
// have more places to look, not fewer.
func flags(c *Config, configPath *string) *flag.FlagSet {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.StringVar(configPath, "config", "", "optional YAML configuration file")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "REST, health and metrics listen address")
	fs.Var(listValue{&c.CORSAllowedOrigins}, "cors-allowed-origins", "comma-separated origins whose browser pages may call the REST API (https://dash.example.com, https://*.example.com; * for any); empty: none")
	fs.StringVar(&c.DebugAddr, "debug-addr", c.DebugAddr, "loopback address for Go's pprof profiles (/debug/pprof/); empty: off")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the embedded engines' data")
	fs.StringVar(&c.ReplicaID, "replica-id", c.ReplicaID, "stable id of this gateway replica (e.g. the StatefulSet pod name); it names the replica's watch feed and intake membership on the NATS servers; empty: generated once and kept in --data-dir")
	fs.StringVar(&c.NATS.URL, "nats-url", c.NATS.URL, "external NATS server or cluster URL(s); empty starts an embedded server")
	fs.StringVar(&c.NATS.CredsFile, "nats-creds", c.NATS.CredsFile, "NATS credentials file for --nats-url")
	fs.StringVar(&c.NATS.Listen, "nats-listen", c.NATS.Listen, "also accept NATS clients on this host:port (embedded server only)")
	fs.StringVar(&c.NATS.Stream, "stream", c.NATS.Stream, "JetStream stream name")
	fs.DurationVar(&c.NATS.MaxAge, "stream-max-age", c.NATS.MaxAge, "how long the stream keeps events (0: forever)")
	fs.Int64Var(&c.NATS.MaxBytes, "stream-max-bytes", c.NATS.MaxBytes, "stream size limit in bytes (-1: unbounded); the embedded server lowers it, with a warning, when its store cannot hold it")
	fs.Int64Var(&c.NATS.MaxStore, "nats-max-store", c.NATS.MaxStore, "bytes the embedded server's JetStream store may use (0: 75% of the disk space free under --data-dir at start)")
	fs.DurationVar(&c.NATS.Duplicates, "stream-duplicates", c.NATS.Duplicates, "window in which a retried idempotency key is not stored twice")
	fs.IntVar(&c.NATS.Replicas, "stream-replicas", c.NATS.Replicas, "stream replicas (3 in a NATS cluster)")
	fs.BoolVar(&c.Series, "series", c.Series, "aggregate isomorphic repeats into event series on the server")
	fs.IntVar(&c.Rules.Shards, "rules-shards", c.Rules.Shards, "shards of the rules; each is evaluated by one replica at a time")
	fs.DurationVar(&c.Rules.LeaseTTL, "rules-lease-ttl", c.Rules.LeaseTTL, "a rules shard whose owner died is taken over after this long")
	fs.DurationVar(&c.Notify.Backoff, "notify-backoff", c.Notify.Backoff, "delay before a failed notification's first retry; doubled at each retry")
	fs.DurationVar(&c.Notify.MaxBackoff, "notify-max-backoff", c.Notify.MaxBackoff, "longest delay between two retries of a notification")
	fs.DurationVar(&c.Notify.RetryFor, "notify-retry-for", c.Notify.RetryFor, "a notification undelivered this long after it was made is a dead letter")
	fs.DurationVar(&c.Notify.PauseAfter, "notify-pause-after", c.Notify.PauseAfter, "a destination failing for this long pauses its rule")
	fs.DurationVar(&c.Notify.Timeout, "notify-timeout", c.Notify.Timeout, "bound on one delivery attempt")
	fs.BoolVar(&c.Notify.DenyPrivate, "notify-deny-private-networks", c.Notify.DenyPrivate, "refuse webhook, Slack and CloudEvents destinations on loopback, private and link-local addresses")
	fs.IntVar(&c.Intake.Partitions, "intake-partitions", c.Intake.Partitions, "partitions of the intake log; each is aggregated by one replica at a time")
	fs.DurationVar(&c.Intake.DecisionTimeout, "intake-decision-timeout", c.Intake.DecisionTimeout, "how long Emit waits to say what an accepted event became")
	fs.DurationVar(&c.Intake.Series.Window, "series-window", c.Intake.Series.Window, "a second isomorphic event within this gap starts a series (default 6m)")
	fs.DurationVar(&c.Intake.Series.FlushInterval, "series-flush-interval", c.Intake.Series.FlushInterval, "an ongoing series' stored event is refreshed at most this often (default 30s)")
	fs.DurationVar(&c.Intake.Series.Heartbeat, "series-heartbeat", c.Intake.Series.Heartbeat, "an ongoing series is rewritten at least this often (default 5m)")
	fs.DurationVar(&c.Intake.Series.FinishAfter, "series-finish-after", c.Intake.Series.FinishAfter, "a series with no occurrence for this long is finished (default 6m)")
	fs.Int64Var(&c.Intake.Series.MaxBytes, "series-max-bytes", c.Intake.Series.MaxBytes, "memory budget of the keys tracked per partition: singletons (87 bytes each), series, recent events (default 4 MiB)")
	fs.IntVar(&c.Intake.Series.MaxActive, "series-max-active", c.Intake.Series.MaxActive, "also cap the keys tracked per partition at this count (default: no cap but the memory budget)")
	fs.StringVar(&c.Auth.TokensFile, "auth-tokens-file", c.Auth.TokensFile, "YAML file of principals, their grants and hashed bearer tokens")
	fs.StringVar(&c.Auth.JWT.KeysFile, "auth-jwt-keys-file", c.Auth.JWT.KeysFile, "JWKS file of keys that sign accepted JWTs")
	fs.StringVar(&c.Auth.JWT.KeysURL, "auth-jwt-keys-url", c.Auth.JWT.KeysURL, "https URL of a JWKS of keys that sign accepted JWTs")
	fs.StringVar(&c.Auth.JWT.Issuer, "auth-jwt-issuer", c.Auth.JWT.Issuer, "required JWT issuer")
	fs.StringVar(&c.Auth.JWT.Audience, "auth-jwt-audience", c.Auth.JWT.Audience, "required JWT audience")
	fs.StringVar(&c.Auth.MTLS.CAFile, "auth-mtls-ca-file", c.Auth.MTLS.CAFile, "CA bundle that signs client certificates (identities mapped in the config file)")
	fs.StringVar(&c.TLS.CertFile, "tls-cert-file", c.TLS.CertFile, "server certificate (PEM) for gRPC and HTTP")
	fs.StringVar(&c.TLS.KeyFile, "tls-key-file", c.TLS.KeyFile, "server private key (PEM)")
	fs.StringVar(&c.ClickHouse.DSN, "clickhouse-dsn", c.ClickHouse.DSN, "ClickHouse server or cluster DSN for clickhouse-go (clickhouse://… native, http(s)://… HTTP); empty uses the embedded engine")
	fs.StringVar(&c.ClickHouse.ChDBLib, "chdb-lib", c.ClickHouse.ChDBLib, "path of the embedded engine libchdb.so (default: the cache scripts/fetch-chdb.sh fills)")
	fs.StringVar(&c.ClickHouse.Database, "clickhouse-database", c.ClickHouse.Database, "ClickHouse database")
	fs.StringVar(&c.ClickHouse.Cluster, "clickhouse-cluster", c.ClickHouse.Cluster, "ClickHouse cluster for ON CLUSTER DDL and replicated tables")
	fs.DurationVar(&c.ClickHouse.TTL, "clickhouse-ttl", c.ClickHouse.TTL, "how long ClickHouse keeps events (per-tenant overrides in the config file)")
	fs.IntVar(&c.ClickHouse.BatchSize, "ingest-batch-size", c.ClickHouse.BatchSize, "events per ClickHouse insert")
	fs.DurationVar(&c.ClickHouse.BatchWait, "ingest-batch-wait", c.ClickHouse.BatchWait, "longest wait before a partial batch is inserted")
	fs.IntVar(&c.ClickHouse.IngestNice, "ingest-nice", c.ClickHouse.IngestNice, "nice value (0-19, 0 = off) of the embedded ClickHouse's ingest (batch encoding, inserts, background merges), so that emit and watch get the CPU first")
	fs.BoolVar(&c.ClickHouse.BackgroundIdle, "background-idle", c.ClickHouse.BackgroundIdle, "run the embedded ClickHouse's background merges under SCHED_IDLE, so that a waking emit or watch preempts them at once (false: at --ingest-nice)")
	fs.IntVar(&c.ClickHouse.MergeThreads, "merge-threads", c.ClickHouse.MergeThreads, "merges the embedded ClickHouse runs at once (0 = one for every two CPUs, at least one; -1 = the engine's own, up to four): each holds its own memory")
	fs.DurationVar(&c.ClickHouse.SlowRead, "clickhouse-slow-read", c.ClickHouse.SlowRead, "log every read of ClickHouse that takes at least this long, with the embedded engine's own time on it and its wait for a connection (0 = never)")
	fs.DurationVar(&c.Ingest.AckWait, "ingest-ack-wait", c.Ingest.AckWait, "with a shared ClickHouse (--clickhouse-dsn), how long an event handed to a gateway's ingest may stay unacknowledged before another gateway (or a restart) takes it over (default 60s)")
	fs.DurationVar(&c.Ingest.ConsumerTTL, "ingest-consumer-ttl", c.Ingest.ConsumerTTL, "deprecated, no effect: the embedded engine is filled from the replica's live feed and leaves no consumer on the NATS servers")
	fs.DurationVar(&c.ReadyMaxIngestLag, "ready-max-ingest-lag", c.ReadyMaxIngestLag, "not ready while the oldest event not yet in this replica's store is older than this")
	fs.IntVar(&c.Events.MaxNoteBytes, "max-note-bytes", c.Events.MaxNoteBytes, "largest note accepted (up to 65536)")
	fs.Var(listValue{&c.Events.Types}, "event-types", "comma-separated event types accepted")
	fs.IntVar(&c.MaxBatch, "max-batch", c.MaxBatch, "most events in one Emit call or EmitStream batch")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "largest request accepted, in bytes")
	fs.IntVar(&c.WatchBuffer, "watch-buffer", c.WatchBuffer, "events queued per watcher before it is ended as too slow")
	fs.DurationVar(&c.WatchReplayIdle, "watch-replay-idle", c.WatchReplayIdle, "how long a catch-up watch whose client does not read keeps its NATS consumer (it makes a new one when the client reads again)")
	fs.IntVar(&c.GCPercent, "gc-percent", c.GCPercent, "garbage collector target (GOGC) of the binary; the GOGC variable overrides it")
	fs.Int64Var(&c.MemoryLimitMiB, "memory-limit-mib", c.MemoryLimitMiB, "soft Go memory limit in MiB (GOMEMLIMIT); 0: a quarter of the memory available, at most 1024; -1: none; the GOMEMLIMIT variable overrides it")
	fs.Int64Var(&c.MemoryBudgetMiB, "memory-budget-mib", c.MemoryBudgetMiB, "resident memory in MiB the whole process keeps under, the embedded engine included: the Go memory limit gives way to what the engine holds, down to half its own; 0: the Go limit plus 512 with the embedded engine, none with --clickhouse-dsn; -1: none")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on graceful shutdown")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", c.OTLPEndpoint, "export traces over OTLP/gRPC to this host:port")
	fs.BoolVar(&c.K8sCoreCorrelate, "k8s-core-correlate", c.K8sCoreCorrelate, "group similar core/v1 events (same source, object, type, reason; 10 within 10 min) into \"(combined from similar events)\" aggregates, as client-go's EventCorrelator does")
	fs.DurationVar(&c.K8s.ContinueTTL, "k8s-continue-ttl", c.K8s.ContinueTTL, "how long a Kubernetes list's continue token stays valid (then 410 Expired with a fresh token)")
	fs.DurationVar(&c.K8s.BookmarkInterval, "k8s-bookmark-interval", c.K8s.BookmarkInterval, "how often a Kubernetes watch that allows bookmarks gets one")
	fs.Float64Var(&c.Limits.Tenant.EmitRate, "tenant-emit-rate", c.Limits.Tenant.EmitRate, "events per second a tenant may emit (0: no limit; per-tenant overrides in the config file)")
	fs.IntVar(&c.Limits.Tenant.EmitBurst, "tenant-emit-burst", c.Limits.Tenant.EmitBurst, "most events a tenant may emit at once (at least max-batch)")
	fs.Float64Var(&c.Limits.Principal.EmitRate, "principal-emit-rate", c.Limits.Principal.EmitRate, "events per second a principal may emit, to all its tenants together (0: no limit)")
	fs.IntVar(&c.Limits.Principal.EmitBurst, "principal-emit-burst", c.Limits.Principal.EmitBurst, "most events a principal may emit at once (at least max-batch)")
	fs.Float64Var(&c.Limits.Tenant.ObjectEmitRate, "object-emit-rate", c.Limits.Tenant.ObjectEmitRate, "events per second one source may emit about one object in a tenant (0: no limit, the default)")
	fs.IntVar(&c.Limits.Tenant.ObjectEmitBurst, "object-emit-burst", c.Limits.Tenant.ObjectEmitBurst, "most events one source may emit about one object at once")
	fs.IntVar(&c.Limits.Tenant.Watches, "tenant-watches", c.Limits.Tenant.Watches, "concurrent watches of one tenant (0: no limit)")
	fs.IntVar(&c.Limits.Principal.Watches, "principal-watches", c.Limits.Principal.Watches, "concurrent watches of one principal (0: no limit)")
	fs.IntVar(&c.Limits.Tenant.Queries, "tenant-queries", c.Limits.Tenant.Queries, "concurrent queries (Query, Get, analytics) of one tenant (0: no limit)")
	fs.DurationVar(&c.Limits.Tenant.QueryWindow, "query-window", c.Limits.Tenant.QueryWindow, "window a Query without since reads, ending at until or now (0: everything)")
	fs.DurationVar(&c.Limits.Tenant.MaxQueryWindow, "max-query-window", c.Limits.Tenant.MaxQueryWindow, "longest window (until - since) of a Query or analytics call (0: no limit)")
	fs.DurationVar(&c.Limits.Tenant.MaxExecutionTime, "query-max-execution-time", c.Limits.Tenant.MaxExecutionTime, "longest a query's ClickHouse statement may run (0: no limit)")
	fs.Int64Var(&c.Limits.Tenant.MaxRowsToRead, "query-max-rows-to-read", c.Limits.Tenant.MaxRowsToRead, "most rows a query's ClickHouse statement may read (0: no limit)")
	fs.Int64Var(&c.Limits.Tenant.MaxBytesToRead, "query-max-bytes-to-read", c.Limits.Tenant.MaxBytesToRead, "most bytes a query's ClickHouse statement may read (0: no limit)")
	return fs
}

// EnvName is the environment variable of a flag: --nats-url is EVENTGATE_NATS_URL.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Load builds the configuration from args (without the program name) and the
// environment lookup getenv (os.LookupEnv in production, a map in tests).
func Load(args []string, getenv func(string) (string, bool)) (Config, error) {
	// First pass: which flags were given, and where the file is.
	var scratch Config
	var configPath string
	probe := flags(&scratch, &configPath)
	probe.SetOutput(io.Discard)
	if err := probe.Parse(args); err != nil {
		return Config{}, fmt.Errorf("flags: %w", err)
	}
	if probe.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %v", probe.Args())
	}
	given := map[string]string{}
	probe.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	if configPath == "" {
		configPath, _ = getenv(EnvName("config"))
	}

	cfg := Default()
	if configPath != "" {
		b, err := os.ReadFile(configPath)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("config file %s: %w", configPath, err)
		}
	}
	var ignored string
	fs := flags(&cfg, &ignored)
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" {
			return
		}
		if v, ok := getenv(EnvName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", EnvName(f.Name), err))
			}
		}
	})
	for name, v := range given {
		if name != "config" {
			if err := fs.Set(name, v); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

// Usage writes the flag documentation to w.
func Usage(w io.Writer) {
	var c Config = Default()
	var p string
	fs := flags(&c, &p)
	fs.SetOutput(w)
	fmt.Fprintf(w, "Usage: gateway [flags]\n\nEvery flag can also be set as %s<FLAG> (e.g. %s) or in the --config YAML file.\n\n", EnvPrefix, EnvName("nats-url"))
	fs.PrintDefaults()
}
