// Package jetstream connects eventgate to NATS JetStream: it starts the
// embedded server when no external one is configured, keeps the events stream
// in shape and publishes events; package watch serves live watches from it.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config says where JetStream is and how the events stream is kept.
type Config struct {
	// URL of an external NATS server or cluster; empty starts an embedded server.
	URL string `yaml:"url"`
	// CredsFile is a NATS credentials file for the external server.
	CredsFile string `yaml:"credsFile"`
	// Listen, for the embedded server, is a host:port to accept NATS clients
	// on as well; empty serves the gateway in process only.
	Listen string `yaml:"listen"`
	// Stream is the name of the events stream.
	Stream string `yaml:"stream"`
	// MaxAge bounds how long the stream keeps events (0: forever).
	MaxAge time.Duration `yaml:"maxAge"`
	// MaxBytes bounds the stream's size (-1: unbounded).
	MaxBytes int64 `yaml:"maxBytes"`
	// Duplicates is the window in which a retried message id is not stored twice.
	Duplicates time.Duration `yaml:"duplicates"`
	// Replicas of the stream (1 for a single server, 3 in a cluster).
	Replicas int `yaml:"replicas"`
	// MaxStore, for the embedded server, bounds the bytes its JetStream
	// store may use (0: the server's default, 75% of the disk space free
	// under the data directory when it starts).
	MaxStore int64 `yaml:"maxStore"`
}

// DefaultConfig returns the defaults: embedded server, stream EVENTS keeping
// 7 days or 10 GiB.
func DefaultConfig() Config {
	return Config{
		Stream:     "EVENTS",
		MaxAge:     7 * 24 * time.Hour,
		MaxBytes:   10 << 30,
		Duplicates: 2 * time.Minute,
		Replicas:   1,
	}
}

// SubjectsAll is the subject space of the events stream.
const SubjectsAll = "events.>"

// Embedded starts an in-process NATS server with JetStream on file storage
// under dataDir. It accepts no network clients unless listen is set.
func Embedded(dataDir, listen string) (*server.Server, error) {
	return EmbeddedStore(dataDir, listen, 0)
}

// EmbeddedStore is Embedded with the JetStream store bounded to maxStore
// bytes (0: the server's default, 75% of the disk space free under dataDir
// when it starts).
func EmbeddedStore(dataDir, listen string, maxStore int64) (*server.Server, error) {
	opts := &server.Options{
		ServerName:        "eventgate-embedded",
		JetStream:         true,
		JetStreamMaxStore: maxStore,
		StoreDir:          filepath.Join(dataDir, "jetstream"),
		NoSigs:            true,
		NoLog:             true,
		DontListen:        listen == "",
	}
	if listen != "" {
		host, port, err := splitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address: %w", err)
		}
		opts.Host, opts.Port = host, port
		if port > 0 {
			// Taken already: say so now (the server would only log it).
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return nil, fmt.Errorf("embedded nats: %w %s: %w", ErrListen, listen, err)
			}
			l.Close()
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	log := &startLog{failed: make(chan struct{})}
	ns.SetLogger(log, false, false)
	ns.Start()
	deadline := time.Now().Add(embeddedReadyTimeout)
	for !ns.ReadyForConnections(100 * time.Millisecond) {
		select {
		case <-log.failed:
			// The server gave up (its listener, say, when the address is
			// taken): say why at once, not after the timeout.
			ns.Shutdown()
			return nil, fmt.Errorf("embedded nats: %s", log.last())
		default:
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			if e := log.last(); e != "" {
				return nil, fmt.Errorf("embedded nats: not ready after %v: %s", embeddedReadyTimeout, e)
			}
			return nil, fmt.Errorf("embedded nats: not ready after %v", embeddedReadyTimeout)
		}
	}
	return ns, nil
}

// ErrListen: the embedded server cannot listen on the address it was
// given.
var ErrListen = errors.New("cannot listen on")

// embeddedReadyTimeout bounds the embedded server's start (recovering a
// large JetStream store takes a while).
const embeddedReadyTimeout = 30 * time.Second

// startLog is the embedded server's logger: it keeps the last error the
// server reported (nothing else), so that a server that cannot start says
// why, and closes failed on a fatal one (the server then stops trying).
type startLog struct {
	mu     sync.Mutex
	err    string
	failed chan struct{}
	once   sync.Once
}

func (l *startLog) Errorf(format string, v ...any) {
	l.mu.Lock()
	l.err = fmt.Sprintf(format, v...)
	l.mu.Unlock()
}

func (l *startLog) Fatalf(format string, v ...any) {
	l.Errorf(format, v...)
	l.once.Do(func() { close(l.failed) })
}

func (l *startLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (*startLog) Noticef(string, ...any) {}
func (*startLog) Warnf(string, ...any)   {}
func (*startLog) Debugf(string, ...any)  {}
func (*startLog) Tracef(string, ...any)  {}

// Connect opens a NATS connection: in process to ns when it is not nil,
// otherwise to cfg.URL.
func Connect(cfg Config, ns *server.Server, name string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}
	url := cfg.URL
	if ns != nil {
		opts = append(opts, nats.InProcessServer(ns))
		url = ""
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	return nc, nil
}

// NewJetStream returns a JetStream handle tuned for batched async publishing.
func NewJetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(8192),
		jetstream.WithPublishAsyncTimeout(10*time.Second),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}

// EnsureStream creates the events stream or updates it to cfg (as
// CreateOrUpdateStream: on a store too small to change it, the stream is
// kept as it is and log, slog.Default() if nil, warns).
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (jetstream.Stream, error) {
	sc := jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "eventgate events: events.<tenant_type>.<tenant_name>.<group_Kind>.<namespace>._ (reserved)",
		Subjects:    []string{SubjectsAll},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		MaxAge:      cfg.MaxAge,
		MaxBytes:    cfg.MaxBytes,
		Duplicates:  cfg.Duplicates,
		Replicas:    max(cfg.Replicas, 1),
		AllowDirect: true,
	}
	s, err := CreateOrUpdateStream(ctx, js, sc, log)
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Stream, err)
	}
	return s, nil
}

// minFittedBytes is the smallest size limit FitMaxBytes lowers a stream to:
// below it the store is too small to be of use, and the stream's creation
// fails instead (StorageExhausted).
const minFittedBytes = 64 << 20

// FitMaxBytes fits cfg.MaxBytes to the store of ns, an embedded server, which
// reserves a stream's MaxBytes when it creates the stream and refuses it
// when its store cannot hold that much (75% of the free disk by default).
// When it cannot, the limit becomes half of what the store has left for the
// stream (the rest is for the streams without a limit: the intake's and
// the key-value buckets'), but never less than the stream, if it exists,
// already has: lowering an existing stream's limit would discard events
// the ingest may not have stored yet. It reports whether it lowered the
// limit and what the store had left; a store with less than 128 MiB left is
// not fitted.
func FitMaxBytes(ctx context.Context, js jetstream.JetStream, ns *server.Server, cfg Config) (Config, int64, bool) {
	if ns == nil || cfg.MaxBytes <= 0 {
		return cfg, 0, false
	}
	jc := ns.JetStreamConfig()
	_, reserved, err := ns.JetStreamReservedResources()
	if jc == nil || err != nil {
		return cfg, 0, false
	}
	var own int64 // what the stream reserves already
	if st, err := js.Stream(ctx, cfg.Stream); err == nil {
		own = max(st.CachedInfo().Config.MaxBytes, 0)
	}
	left := jc.MaxStore - (reserved - own)
	if cfg.MaxBytes <= left {
		return cfg, left, false
	}
	fit := max(left/2, own)
	if fit < minFittedBytes || fit >= cfg.MaxBytes {
		return cfg, left, false
	}
	cfg.MaxBytes = fit
	return cfg, left, true
}

// StorageExhausted reports a server's refusal to reserve a stream's
// MaxBytes: its store has less left (JetStream error 10047).
func StorageExhausted(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.ErrorCode(10047)
}

func splitHostPort(hp string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	var port int
	if _, err := fmt.Sscanf(portStr, "%d", &port); err != nil {
		return "", 0, fmt.Errorf("port %q: %w", portStr, err)
	}
	return host, port, nil
}
