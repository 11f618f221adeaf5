// Package client is the Go SDK for eventgate: one import for services that
// emit events and for tools that read them.
//
// A Client is a gRPC connection with credentials (bearer token, a token
// source refreshed per call, TLS, mutual TLS). On it:
//
//   - NewRecorder gives services client-go's events recorder without
//     Kubernetes: Eventf never blocks the application; events are batched
//     over EmitStream, retried with exponential backoff and jitter without
//     ever being stored twice (each event carries its uid, the server's
//     idempotency key), and dropped — counted, reported — only when the
//     bounded queue is full or a per-object rate limit says so.
//   - Watch streams events live and resumes from the last resourceVersion
//     across disconnects; when the server no longer has that position
//     (410 Gone) it re-lists from the store, as an informer does.
//   - Query iterates over every page of a query (iter.Seq2); Top and
//     Histogram are the analytics.
//
// The API's message types are re-exported, so a user imports only this
// package.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// The API's types, re-exported.
type (
	Event              = eventgatev1.Event
	EventSeries        = eventgatev1.EventSeries
	ObjectReference    = eventgatev1.ObjectReference
	Tenant             = eventgatev1.Tenant
	EmitRequest        = eventgatev1.EmitRequest
	EmitResponse       = eventgatev1.EmitResponse
	EmitResult         = eventgatev1.EmitResult
	StreamWatchRequest = eventgatev1.StreamWatchRequest
	QueryRequest       = eventgatev1.QueryRequest
	ObjectSelector     = eventgatev1.ObjectSelector
	GetRequest         = eventgatev1.GetRequest
	TopRequest         = eventgatev1.TopRequest
	TopResponse        = eventgatev1.TopResponse
	HistogramRequest   = eventgatev1.HistogramRequest
	HistogramResponse  = eventgatev1.HistogramResponse
	QueryResponse      = eventgatev1.QueryResponse
)

// Event types.
const (
	TypeNormal  = "Normal"
	TypeWarning = "Warning"
)

// TokenSource returns the bearer token for one call; it is asked before
// every call, so it may refresh a short-lived token.
type TokenSource func(ctx context.Context) (string, error)

// Option configures New.
type Option func(*options) error

type options struct {
	tls      *tls.Config
	insecure bool
	token    TokenSource
	dial     []grpc.DialOption
	timeout  time.Duration
}

// WithToken sends token as the bearer token of every call.
func WithToken(token string) Option {
	return func(o *options) error {
		o.token = func(context.Context) (string, error) { return token, nil }
		return nil
	}
}

// WithTokenSource asks src for the bearer token of every call.
func WithTokenSource(src TokenSource) Option {
	return func(o *options) error { o.token = src; return nil }
}

// WithTLS connects over TLS with cfg (nil: the system's roots).
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) error {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		o.tls = cfg
		return nil
	}
}

// WithCAFile trusts the PEM certificates in file for the server's
// certificate (TLS).
func WithCAFile(file string) Option {
	return func(o *options) error {
		pem, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("CA file %s: no PEM certificate", file)
		}
		o.tlsConfig().RootCAs = pool
		return nil
	}
}

// WithClientCertificate presents the certificate in certFile and keyFile
// (mutual TLS): the gateway authenticates the caller by it.
func WithClientCertificate(certFile, keyFile string) Option {
	return func(o *options) error {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		o.tlsConfig().Certificates = []tls.Certificate{cert}
		return nil
	}
}

// WithInsecure connects without TLS: for a gateway on loopback, or behind
// a proxy that terminates TLS. A token is then sent in the clear.
func WithInsecure() Option {
	return func(o *options) error { o.insecure = true; return nil }
}

// WithTimeout bounds each call that has no deadline of its own (not
// streams); the default is 30s.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error { o.timeout = d; return nil }
}

// WithDialOptions adds gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) error { o.dial = append(o.dial, opts...); return nil }
}

func (o *options) tlsConfig() *tls.Config {
	if o.tls == nil {
		o.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return o.tls
}

// Client is a connection to an eventgate gateway. It is safe for
// concurrent use.
type Client struct {
	conn      *grpc.ClientConn
	events    eventgatev1.EventServiceClient
	analytics eventgatev1.AnalyticsServiceClient
	rules     eventgatev1.RulesServiceClient
	timeout   time.Duration
}

// ErrConfig is returned for options that contradict each other.
var ErrConfig = errors.New("eventgate client: invalid options")

// New connects to the gateway's gRPC address target ("host:port"). The
// connection is made lazily and kept; Close releases it. Without WithTLS,
// WithCAFile, WithClientCertificate or WithInsecure it uses TLS with the
// system's roots.
func New(target string, opts ...Option) (*Client, error) {
	o := options{timeout: 30 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.insecure && o.tls != nil {
		return nil, fmt.Errorf("%w: WithInsecure with TLS options", ErrConfig)
	}
	dial := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}
	if o.insecure {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(o.tlsConfig())))
	}
	if o.token != nil {
		dial = append(dial, grpc.WithPerRPCCredentials(tokenCreds{src: o.token, secure: !o.insecure}))
	}
	conn, err := grpc.NewClient(target, append(dial, o.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("eventgate client: %w", err)
	}
	return &Client{
		conn:      conn,
		events:    eventgatev1.NewEventServiceClient(conn),
		analytics: eventgatev1.NewAnalyticsServiceClient(conn),
		rules:     eventgatev1.NewRulesServiceClient(conn),
		timeout:   o.timeout,
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Events is the generated EventService client, for what the helpers do
// not cover.
func (c *Client) Events() eventgatev1.EventServiceClient { return c.events }

// Analytics is the generated AnalyticsService client.
func (c *Client) Analytics() eventgatev1.AnalyticsServiceClient { return c.analytics }

// Rules is the generated RulesService client: a tenant's rules and their
// deliveries.
func (c *Client) Rules() eventgatev1.RulesServiceClient { return c.rules }

// withTimeout gives ctx the client's default timeout when it has no
// deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// Emit stores a batch of events and answers once they are durable.
func (c *Client) Emit(ctx context.Context, req *EmitRequest) (*EmitResponse, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	return c.events.Emit(ctx, req)
}

// Get returns one stored event, by uid or by namespace and name.
func (c *Client) Get(ctx context.Context, req *GetRequest) (*Event, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, err := c.events.Get(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.GetEvent(), nil
}

// Top counts events by one dimension.
func (c *Client) Top(ctx context.Context, req *TopRequest) (*TopResponse, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	return c.analytics.Top(ctx, req)
}

// Histogram counts events per time bucket.
func (c *Client) Histogram(ctx context.Context, req *HistogramRequest) (*HistogramResponse, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	return c.analytics.Histogram(ctx, req)
}

// tokenCreds sends a TokenSource's token as a bearer token.
type tokenCreds struct {
	src    TokenSource
	secure bool
}

func (t tokenCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, err := t.src(ctx)
	if err != nil {
		return nil, fmt.Errorf("eventgate client: token: %w", err)
	}
	if tok == "" {
		return nil, nil
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (t tokenCreds) RequireTransportSecurity() bool { return t.secure }
