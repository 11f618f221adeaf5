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

// StoreConsumer names the durable consumer of one replica's own store (an
// embedded engine): every replica copies the whole stream into its store.
func StoreConsumer(replicaID string) string { return "ingest-" + replicaID }

// DefaultConsumerTTL is how long the consumer of a store whose replica is
// gone is kept before the server deletes it.
const DefaultConsumerTTL = 24 * time.Hour

// MetadataStore is the consumer metadata key holding the id of the store a
// store's own consumer copies into.
const MetadataStore = "eventgate.store"

// ErrInvalidReplicaID is returned for a replica id that cannot name a
// consumer.
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

// Config tunes the ingest consumer. Zero values take defaults.
type Config struct {
	// Durable is the consumer name (default "clickhouse-ingest").
	Durable string `yaml:"durable"`
	// StoreID, when set, makes the consumer the store's own (see
	// StoreConsumer): the id is recorded in the consumer's metadata, and a
	// consumer found recording another store (the store was wiped, or the
	// name was reused) is recreated from the start of the stream, so that
	// its ack floor never claims events the store does not hold.
	StoreID string `yaml:"-"`
	// AdoptFrom names a consumer whose ack floor this store is known to hold
	// (the shared consumer of a single replica on embedded NATS, before
	// replicas had consumers of their own). When the store's own consumer
	// is first created, it starts after that floor instead of copying the
	// stream again, and the old consumer is deleted.
	AdoptFrom string `yaml:"-"`
	// ConsumerTTL is how long a store's own consumer outlives its replica:
	// the server deletes it after this long without a fetch (default 24h).
	// A replica that comes back later gets a new consumer and copies the
	// stream again. The shared consumer is never deleted.
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
	// LagInterval is how often the pending and oldest-age gauges are
	// refreshed (default 5s).
	LagInterval time.Duration `yaml:"lagInterval"`
}

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
	if c.StoreID == "" {
		c.ConsumerTTL = 0
	} else if c.ConsumerTTL <= 0 {
		c.ConsumerTTL = DefaultConsumerTTL
	}
}
