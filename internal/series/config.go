package series

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Config; a zero field means its default.
const (
	DefaultWindow        = 6 * time.Minute
	DefaultFlushInterval = 30 * time.Second
	DefaultHeartbeat     = 5 * time.Minute
	DefaultFinishAfter   = 6 * time.Minute
	DefaultMaxBytes      = 4 << 20
)

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid series config")

// Config tunes an Aggregator. All durations are log time (see the package
// documentation); a zero field takes its default.
type Config struct {
	// Window: a second isomorphic occurrence at most Window after a singleton
	// starts a series (a gap of exactly Window still does). Default 6m.
	Window time.Duration `yaml:"window"`
	// FlushInterval: an ongoing series whose count changed is rewritten at
	// most this often. Default 30s (the KEP's 30m was set by etcd's write
	// cost, which ClickHouse does not have).
	FlushInterval time.Duration `yaml:"flushInterval"`
	// Heartbeat: an ongoing series is rewritten at least this often, even
	// unchanged. At least FlushInterval, and less than FinishAfter (otherwise
	// the series finishes before a heartbeat could be due). Default 5m.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// FinishAfter: an ongoing series with no occurrence for longer than this
	// is finished (a gap of exactly FinishAfter still continues it).
	// Default 6m.
	FinishAfter time.Duration `yaml:"finishAfter"`
	// MaxBytes is the memory budget of an Aggregator's tracked keys:
	// singletons that may still start a series (87 bytes each),
	// ongoing series (about three times their event's encoding) and a ring
	// of the most recent singletons' encodings (an eighth of the budget).
	// See the package documentation for what happens at the budget.
	// Default 4 MiB (about 40,000 singletons), at least 64 KiB.
	MaxBytes int64 `yaml:"maxBytes"`
	// MaxActive, when set, also caps the number of tracked keys. Default
	// none: the budget is MaxBytes.
	MaxActive int `yaml:"maxActive"`
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.FinishAfter == 0 {
		c.FinishAfter = DefaultFinishAfter
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	return c
}

// Validate reports every problem of c, with zero fields taken as their
// defaults. Each error wraps ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"window", c.Window},
		{"flushInterval", c.FlushInterval},
		{"heartbeat", c.Heartbeat},
		{"finishAfter", c.FinishAfter},
	} {
		if d.v < 0 {
			bad("%s must be positive, got %v", d.name, d.v)
		}
	}
	if c.MaxBytes < 64<<10 {
		bad("maxBytes must be at least 64 KiB, got %d", c.MaxBytes)
	}
	if c.MaxActive < 0 {
		bad("maxActive must be positive, got %d", c.MaxActive)
	}
	if c.FlushInterval > c.Heartbeat {
		bad("flushInterval (%v) must not exceed heartbeat (%v)", c.FlushInterval, c.Heartbeat)
	}
	if c.Heartbeat >= c.FinishAfter {
		bad("heartbeat (%v) must be shorter than finishAfter (%v)", c.Heartbeat, c.FinishAfter)
	}
	return errors.Join(errs...)
}
