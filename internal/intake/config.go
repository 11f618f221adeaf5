package intake

import (
	"errors"
	"fmt"
	"time"

	"github.com/eventgate/eventgate/internal/series"
)

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid intake config")

// Config says where occurrences are logged, how the log is partitioned and
// owned, and how the owners checkpoint.
type Config struct {
	// Stream is the intake stream, the durable log of every accepted
	// occurrence. Default "EVENTS_INTAKE".
	Stream string `yaml:"stream"`
	// SubjectPrefix: partition p is the subject "<prefix>.<p>"; the stream
	// holds "<prefix>.>". Default "intake".
	SubjectPrefix string `yaml:"subjectPrefix"`
	// EventsStream receives the writes: singletons and series versions.
	// Default "EVENTS". It must exist, and its duplicate window must exceed
	// CheckpointInterval plus a takeover (PinnedTTL and a restore).
	EventsStream string `yaml:"eventsStream"`
	// Partitions of the intake log; each has one owner at a time. Default 16.
	// It cannot change while the bucket holds checkpoints: Start refuses.
	Partitions int `yaml:"partitions"`
	// Replicas of the intake stream and the checkpoint bucket (3 in a
	// cluster). Default 1.
	Replicas int `yaml:"replicas"`
	// MaxAge bounds how long the intake keeps occurrences. It must exceed
	// the checkpoint interval plus the longest takeover, or an owner that
	// takes over finds its log gone. Default 24h.
	MaxAge time.Duration `yaml:"maxAge"`
	// Duplicates is the intake's duplicate window: a Submit retried with the
	// same message ids within it is logged once. Default 2m.
	Duplicates time.Duration `yaml:"duplicates"`
	// Bucket is the JetStream KV bucket of the partitions' checkpoints.
	// Default "eventgate_series".
	Bucket string `yaml:"bucket"`
	// CheckpointInterval: an owner checkpoints this often while its
	// partition moves (and every CheckpointEntries entries). A takeover
	// replays at most this much of the log. Default 2s.
	CheckpointInterval time.Duration `yaml:"checkpointInterval"`
	// CheckpointEntries: an owner also checkpoints after this many entries.
	// Default 20000.
	CheckpointEntries int `yaml:"checkpointEntries"`
	// PinnedTTL: a partition owner that stops pulling for this long loses
	// the partition to another replica. Default 5s.
	PinnedTTL time.Duration `yaml:"pinnedTTL"`
	// DecisionTimeout bounds how long Submit waits for the owners' decisions
	// once the occurrences are durable. Default 5s.
	DecisionTimeout time.Duration `yaml:"decisionTimeout"`
	// FetchBatch is the most entries an owner pulls at once. Default 512.
	FetchBatch int `yaml:"fetchBatch"`
	// Series tunes the aggregation. Change it at a full restart only (see
	// package series).
	Series series.Config `yaml:"series"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Stream:             "EVENTS_INTAKE",
		SubjectPrefix:      "intake",
		EventsStream:       "EVENTS",
		Partitions:         16,
		Replicas:           1,
		MaxAge:             24 * time.Hour,
		Duplicates:         2 * time.Minute,
		Bucket:             "eventgate_series",
		CheckpointInterval: 2 * time.Second,
		CheckpointEntries:  20_000,
		PinnedTTL:          5 * time.Second,
		DecisionTimeout:    5 * time.Second,
		FetchBatch:         512,
	}
}

// withDefaults fills every zero field from DefaultConfig.
// ReplayWindow is how long the events stream should remember a write's id.
// A new owner does not publish the replayed writes it finds stored
// (partition_replay.go), so the window only covers the writes a deposed
// owner still had in flight when its successor read the stream: it lost
// its pin after PinnedTTL without a pull and ends its batch at the next.
func (c Config) ReplayWindow() time.Duration {
	c = c.withDefaults()
	return 3*c.PinnedTTL + 5*time.Second
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Stream == "" {
		c.Stream = d.Stream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = d.SubjectPrefix
	}
	if c.EventsStream == "" {
		c.EventsStream = d.EventsStream
	}
	if c.Partitions == 0 {
		c.Partitions = d.Partitions
	}
	if c.Replicas == 0 {
		c.Replicas = d.Replicas
	}
	if c.MaxAge == 0 {
		c.MaxAge = d.MaxAge
	}
	if c.Duplicates == 0 {
		c.Duplicates = d.Duplicates
	}
	if c.Bucket == "" {
		c.Bucket = d.Bucket
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = d.CheckpointInterval
	}
	if c.CheckpointEntries == 0 {
		c.CheckpointEntries = d.CheckpointEntries
	}
	if c.PinnedTTL == 0 {
		c.PinnedTTL = d.PinnedTTL
	}
	if c.DecisionTimeout == 0 {
		c.DecisionTimeout = d.DecisionTimeout
	}
	if c.FetchBatch == 0 {
		c.FetchBatch = d.FetchBatch
	}
	return c
}

// Validate reports every problem of c, zero fields taken as their defaults.
// Each error wraps ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.Partitions < 1 || c.Partitions > 1024 {
		bad("partitions must be in 1..1024, got %d", c.Partitions)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		bad("replicas must be in 1..5, got %d", c.Replicas)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"maxAge", c.MaxAge}, {"duplicates", c.Duplicates}, {"checkpointInterval", c.CheckpointInterval},
		{"pinnedTTL", c.PinnedTTL}, {"decisionTimeout", c.DecisionTimeout},
	} {
		if d.v < 0 {
			bad("%s must be positive, got %v", d.name, d.v)
		}
	}
	if c.PinnedTTL > 0 && c.PinnedTTL < 500*time.Millisecond {
		bad("pinnedTTL must be at least 500ms, got %v", c.PinnedTTL)
	}
	if c.MaxAge > 0 && c.MaxAge < 10*(c.CheckpointInterval+c.PinnedTTL) {
		bad("maxAge (%v) must be well above checkpointInterval + pinnedTTL (at least 10x)", c.MaxAge)
	}
	window := c.Series.Window
	if window == 0 {
		window = series.DefaultWindow
	}
	if c.MaxAge > 0 && c.MaxAge < window+10*(c.CheckpointInterval+c.PinnedTTL) {
		// A tracked singleton's event is read back from the log when a
		// second occurrence starts its series.
		bad("maxAge (%v) must exceed the series window (%v) plus a takeover", c.MaxAge, window)
	}
	if c.Duplicates > c.MaxAge {
		bad("duplicates (%v) must not exceed maxAge (%v)", c.Duplicates, c.MaxAge)
	}
	if c.CheckpointEntries < 1 {
		bad("checkpointEntries must be positive, got %d", c.CheckpointEntries)
	}
	if c.FetchBatch < 1 || c.FetchBatch > 10_000 {
		bad("fetchBatch must be in 1..10000, got %d", c.FetchBatch)
	}
	if err := c.Series.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%w: series: %w", ErrInvalidConfig, err))
	}
	return errors.Join(errs...)
}

// subject is partition p's subject.
func (c Config) subject(p int) string { return fmt.Sprintf("%s.%d", c.SubjectPrefix, p) }

// consumer is partition p's durable consumer.
func consumerName(p int) string { return fmt.Sprintf("series-%d", p) }

// ownerGroup is the priority group every replica pulls in.
const ownerGroup = "owner"
