package ingest

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// DefaultConsumer is the durable consumer the gateway replicas share when
// they share one ClickHouse: each message is delivered to one replica, and
// the consumer's ack floor says what ClickHouse holds.
const DefaultConsumer = "clickhouse-ingest"

// StoreConsumer names the durable consumer through which earlier versions
// filled one replica's own store (an embedded engine); its ack floor is
// adopted by the store's Feed.
func StoreConsumer(replicaID string) string { return "ingest-" + replicaID }

// MetadataStore is the metadata key of such a consumer holding the id of
// the store it copied into.
const MetadataStore = "eventgate.store"

// ErrInvalidReplicaID is returned for a replica id that cannot name the
// replica's consumers.
var ErrInvalidReplicaID = errors.New("invalid replica id")

var replicaIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

// ValidateReplicaID checks that id can name a JetStream consumer: 1 to 63
// letters, digits, '-' and '_', starting with a letter or digit.
func ValidateReplicaID(id string) error {
	if !replicaIDPattern.MatchString(id) {
		return fmt.Errorf("%w %q: use 1 to 63 letters, digits, '-' or '_', starting with a letter or digit", ErrInvalidReplicaID, id)
	}
	return nil
}

// Config tunes the ingest. Zero values take defaults.
type Config struct {
	// Durable is the consumer name (default "clickhouse-ingest"). For a
	// Feed, it is the store's consumer of earlier versions
	// (StoreConsumer), whose ack floor it adopts.
	Durable string `yaml:"durable"`
	// StoreID, for a Feed, is the id of its store: a consumer of earlier
	// versions is adopted only if it recorded this id.
	StoreID string `yaml:"-"`
	// AdoptFrom, for a Feed, names a consumer whose ack floor its store is
	// known to hold when it has no floor yet and no consumer of its own
	// (the shared consumer of a single replica on embedded NATS, before
	// replicas had stores of their own). The feed starts after that floor
	// instead of copying the stream again, and deletes the consumer.
	AdoptFrom string `yaml:"-"`
	// ConsumerTTL is no longer used: a store of its own is filled from the
	// replica's live feed and leaves no consumer on the server. Kept so
	// that configurations that set it still load.
	ConsumerTTL time.Duration `yaml:"consumerTTL"`
	// BatchSize and BatchWait are the size and time thresholds of a batch;
	// they default to the store's (Writer.Batch).
	BatchSize int           `yaml:"batchSize"`
	BatchWait time.Duration `yaml:"batchWait"`
	// AckWait is how long a delivered message may stay unacknowledged
	// before JetStream redelivers it (default 60s). While an insert is
	// retried its messages are kept alive with in-progress acks.
	AckWait time.Duration `yaml:"ackWait"`
	// MaxAckPending bounds the messages delivered and not yet acknowledged,
	// across the replicas sharing the consumer (default 10 × BatchSize).
	MaxAckPending int `yaml:"maxAckPending"`
	// InsertTimeout bounds one insert attempt (default 30s); a timed-out
	// attempt is retried.
	InsertTimeout time.Duration `yaml:"insertTimeout"`
	// MinBackoff and MaxBackoff bound the retry delay after a failed insert
	// or fetch (defaults 100ms and 10s).
	MinBackoff time.Duration `yaml:"minBackoff"`
	MaxBackoff time.Duration `yaml:"maxBackoff"`
	// FloorFile, for the ingest of a replica's own store from its live feed
	// (StartFeed), is the file beside the store that keeps its floor.
	FloorFile string `yaml:"-"`
	// TapBuffer bounds the live feed's messages queued for the store
	// (StartFeed; default DefaultTapBuffer, at least 2 × BatchSize): past
	// it, the ingest catches up from the stream instead.
	TapBuffer int `yaml:"-"`
	// LagInterval is how often the pending and oldest-age gauges are
	// refreshed (default 5s).
	LagInterval time.Duration `yaml:"lagInterval"`
}

// DefaultTapBuffer is the default of Config.TapBuffer. The messages queued
// are held in memory until inserted: 40,000 of the workload's (about 900
// bytes each with their headers) are about 36 MiB. It was 8 × BatchSize;
// with batches of 20,000 that let the queue hold 160,000 messages under a
// sustained load, and the collector's CPU per event in the write phase
// went from 6-11 to 22-30 ms per 1,000 events (session 28).
const DefaultTapBuffer = 40_000

func (c *Config) withDefaults(batchSize int, batchWait time.Duration) {
	if c.Durable == "" {
		c.Durable = DefaultConsumer
	}
	if c.BatchSize <= 0 {
		c.BatchSize = batchSize
	}
	if c.BatchWait <= 0 {
		c.BatchWait = batchWait
	}
	if c.AckWait <= 0 {
		c.AckWait = 60 * time.Second
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = 10 * c.BatchSize
	}
	c.MaxAckPending = max(c.MaxAckPending, c.BatchSize)
	if c.InsertTimeout <= 0 {
		c.InsertTimeout = 30 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.LagInterval <= 0 {
		c.LagInterval = 5 * time.Second
	}
	if c.TapBuffer <= 0 {
		c.TapBuffer = max(DefaultTapBuffer, 2*c.BatchSize)
	}
}
