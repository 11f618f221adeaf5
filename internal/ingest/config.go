package ingest

import "time"

// DefaultConsumer is the durable consumer every gateway replica
// shares: each message is delivered to one replica, and the consumer's ack
// floor says what ClickHouse holds.
const DefaultConsumer = "clickhouse-ingest"

// Config tunes the ingest consumer. Zero values take defaults.
type Config struct {
	// Durable is the consumer name (default "clickhouse-ingest").
	Durable string `yaml:"durable"`
	// BatchSize and BatchWait are the size and time thresholds of a batch;
	// they default to the store's (Writer.Batch).
	BatchSize int           `yaml:"batchSize"`
	BatchWait time.Duration `yaml:"batchWait"`
	// AckWait is how long a delivered message may stay unacknowledged
	// before JetStream redelivers it (default 60s). While an insert is
	// retried its messages are kept alive with in-progress acks.
	AckWait time.Duration `yaml:"ackWait"`
	// MaxAckPending bounds the messages delivered and not yet acknowledged,
	// across all replicas (default 10 × BatchSize).
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
}
