// Package gateway assembles eventgate: it builds every dependency in one
// place, serves gRPC and REST on the listeners it is given, and shuts down
// gracefully within a bound.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/fullstorydev/grpchan/inprocgrpc"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/ingest"
	"github.com/eventgate/eventgate/internal/intake"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/service"
	"github.com/eventgate/eventgate/internal/telemetry"
	"github.com/eventgate/eventgate/internal/watch"
)

// Version is the gateway's version, set at build time.
var Version = "dev"

// Option adjusts how a gateway is built (tests use them).
type Option func(*options)

type options struct {
	tracerProvider trace.TracerProvider
}

// WithTracerProvider makes the gateway trace with tp instead of its own.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// Gateway is a running eventgate.
type Gateway struct {
	cfg      config.Config
	log      *slog.Logger
	registry *prometheus.Registry

	ns  *server.Server // embedded NATS, nil with an external one
	nc  *nats.Conn     // control: streams, KV, intake ownership, decisions
	js  jetstream.JetStream
	hub *watch.Hub
	// paths are the data paths' own connections (natsPaths).
	paths natsPaths

	store  *clickhouse.Store
	ingest storeIngest
	intake *intake.Intake

	tp       trace.TracerProvider
	shutdown []func(context.Context) error // run in reverse order

	grpc       *grpc.Server
	grpcInproc *grpc.Server
	events     *service.Events
	tenants    *service.Tenants
	calls      *callTracker // calls other than watches, in flight
	tls        *tls.Config
	health     *health.Server
	inproc     *bufconn.Listener
	proxy      *grpc.ClientConn // the REST gateway's streams, to grpcInproc
	restUnary  *inprocgrpc.Channel
	rest       restConn // the REST gateway's connection: restUnary and proxy
	httpSrv    *http.Server
	ready      *readiness
	replica    *replica
	auth       *authz.Authenticator
	rules      rulesParts // rules.go

	closeOnce sync.Once
	planOnce  sync.Once
	plan      shutdownPlan // shutdown.go
}

// New builds a gateway, in steps: telemetry, the log (NATS, the events
// stream, the watch feed), the store and its ingest, the intake, the
// services, the gRPC servers, readiness, and the HTTP server. Close
// releases what New acquired when Serve is not called.
func New(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...Option) (g *Gateway, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	g = &Gateway{cfg: cfg, log: log, registry: prometheus.NewRegistry()}
	// Not g: every failure returns nil, which would leave Close nothing to
	// release (and a nil receiver).
	partial := g
	defer func() {
		if err != nil {
			partial.Close()
		}
	}()
	g.registry.MustRegister(newGoCollector(), telemetry.RuntimeLatencies(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if err := g.startTelemetry(ctx, o); err != nil {
		return nil, err
	}
	// Who this replica is names what it holds on the servers: its watch
	// feed and its intake membership.
	if g.replica, err = resolveReplica(cfg, g.log); err != nil {
		return nil, err
	}
	g.replica.registerMetrics(g.registry)
	g.log.Info("replica", "id", g.replica.ID, "store", g.replica.Store, "own_store", g.replica.Own, "ingest_consumer", g.replica.Consumer)
	if err := g.startLog(ctx); err != nil {
		return nil, err
	}
	if err := g.startStore(ctx); err != nil {
		return nil, err
	}
	in, err := g.startIntake(ctx)
	if err != nil {
		return nil, err
	}
	lim, err := limits.New(cfg.Limits, g.registry)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	g.events = service.NewEvents(service.EventsConfig{
		Normalizer:  event.Normalizer{Limits: cfg.Events},
		MaxBatch:    cfg.MaxBatch,
		WatchBuffer: cfg.WatchBuffer,
		SendEncoded: true, // the server's codec is decodeGuard
		Intake:      in,
		Limits:      lim,
	}, ejs.NewPublisher(g.paths.emit.js), g.hub, g.store, g.ingest, log, g.tp, service.NewMetrics(g.registry))
	analytics := service.NewAnalytics(g.store, g.ingest, log).WithTenantLimits(lim)
	var tracker service.Tracker
	if g.intake != nil {
		tracker = g.intake
	}
	g.tenants = service.NewTenants(lim, tracker, g.store, log)
	if err := g.startRules(ctx); err != nil {
		return nil, err
	}
	if err := g.newServers(analytics); err != nil {
		return nil, err
	}
	g.ready = g.newReadiness()
	if err := g.newHTTP(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// startTelemetry sets up tracing: the provider given, or the gateway's own.
func (g *Gateway) startTelemetry(ctx context.Context, o options) error {
	if o.tracerProvider != nil {
		g.tp = o.tracerProvider
		return nil
	}
	tp, shutdown, err := telemetry.NewTracerProvider(ctx, g.cfg.OTLPEndpoint, Version)
	if err != nil {
		return err
	}
	g.tp = tp
	g.shutdown = append(g.shutdown, shutdown)
	return nil
}

// startLog starts the embedded NATS server (or connects to the configured
// one), ensures the events stream and starts the watch feed.
func (g *Gateway) startLog(ctx context.Context) error {
	cfg, log := g.cfg, g.log
	var err error
	if cfg.NATS.URL == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		dir, _ := filepath.Abs(cfg.DataDir)
		if g.ns, err = ejs.EmbeddedStore(dir, cfg.NATS.Listen, cfg.NATS.MaxStore); err != nil {
			return err
		}
		log.Info("embedded NATS JetStream started", "store", filepath.Join(dir, "jetstream"), "listen", cfg.NATS.Listen)
	}
	if g.nc, err = ejs.Connect(cfg.NATS, g.ns, "eventgate-gateway"); err != nil {
		return err
	}
	if g.js, err = ejs.NewJetStream(g.nc); err != nil {
		return err
	}
	if err := g.paths.connect(cfg.NATS, g.ns); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	scfg := eventsStreamConfig(cfg)
	// The embedded server reserves the stream's size limit in its store,
	// which is 75% of the free disk by default: on a small disk the
	// default limit (10 GiB) would stop the gateway from starting.
	if fitted, left, ok := ejs.FitMaxBytes(sctx, g.js, g.ns, scfg); ok {
		log.Warn("the events stream's size limit does not fit the embedded JetStream store; the stream keeps less "+
			"(free disk space under --data-dir, or set --stream-max-bytes or --nats-max-store)",
			"stream_max_bytes", scfg.MaxBytes, "store_left_bytes", left, "max_bytes", fitted.MaxBytes)
		scfg = fitted
	}
	if _, err := ejs.EnsureStream(sctx, g.js, scfg, g.log); err != nil {
		if ejs.StorageExhausted(err) {
			return fmt.Errorf("%w: the NATS server's store cannot hold the events stream's size limit, --stream-max-bytes %d; "+
				"free disk space where it stores streams, or lower --stream-max-bytes (-1 reserves nothing: --stream-max-age bounds the stream)",
				err, scfg.MaxBytes)
		}
		return err
	}
	g.hub, err = watch.Start(sctx, g.paths.watch.js, cfg.NATS.Stream, log, watch.NewMetrics(g.registry), watch.OfReplica(g.replica.ID), watch.ReplayIdle(cfg.WatchReplayIdle))
	return err
}

// startStore opens the event store and starts the ingest that fills it
// from the events stream.
func (g *Gateway) startStore(ctx context.Context) error {
	cfg := g.cfg
	chcfg := cfg.ClickHouse
	if chcfg.DSN == "" && chcfg.DataDir == "" {
		dir, _ := filepath.Abs(cfg.DataDir)
		chcfg.DataDir = filepath.Join(dir, "clickhouse")
	}
	var err error
	if g.store, err = clickhouse.Open(ctx, chcfg, g.log); err != nil {
		return err
	}
	if g.store.Embedded() {
		g.registry.MustRegister(newEngineCollector(g.store))
	}
	// Not ctx: it ends at the signal to stop, and would abort the batch in
	// hand (its deliveries would come back only after the ack wait). Close
	// stops ingest gracefully, within its shutdown plan (shutdown.go).
	w, err := g.store.NewWriter()
	if err != nil {
		return err
	}
	icfg := cfg.Ingest
	if !g.replica.Own {
		// Replicas that share a store share its consumer.
		icfg.Durable = g.replica.Consumer
		in, err := ingest.Start(context.WithoutCancel(ctx), g.paths.ingest.js, cfg.NATS.Stream, w, icfg, g.log, g.registry)
		if err != nil {
			return err
		}
		g.ingest = in
		return nil
	}
	// An embedded engine is this replica's alone and must see the whole
	// stream: it is filled from the replica's live feed, its floor kept
	// beside it. On first start it adopts the ack floor of the consumer
	// that filled it in earlier versions.
	icfg.StoreID = g.replica.Store
	icfg.Durable = ingest.StoreConsumer(g.replica.ID)
	// Named after the database: the engine's directory may hold others.
	icfg.FloorFile = filepath.Join(chcfg.DataDir, ingest.FloorFileName+"-"+g.store.Config().Database)
	held, err := g.store.HoldsEvents(ctx)
	if err != nil {
		return err
	}
	if !held {
		// A database made anew (dropped, or its directory wiped): its
		// floor, if one was left, speaks for what it no longer holds.
		if err := os.Remove(icfg.FloorFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("clickhouse ingest: floor file: %w", err)
		}
	}
	if cfg.NATS.URL == "" && cfg.NATS.Listen == "" {
		// No other gateway reaches this embedded NATS: the shared
		// consumer of earlier versions copied into this store alone.
		icfg.AdoptFrom = ingest.DefaultConsumer
	}
	in, err := ingest.StartFeed(context.WithoutCancel(ctx), g.paths.ingest.js, cfg.NATS.Stream, g.hub, w, icfg, g.log, g.registry)
	if err != nil {
		return err
	}
	g.ingest = in
	return nil
}

// storeIngest fills this replica's store from the events stream: a
// consumer shared with the replicas on the same ClickHouse
// (ingest.Consumer), or the replica's live feed for its own store
// (ingest.Feed).
type storeIngest interface {
	// AckFloor is the sequence up to which the store holds every event.
	AckFloor(ctx context.Context) (uint64, error)
	// Lag is the events not yet in the store and the oldest one's age.
	Lag(ctx context.Context) (pending uint64, oldestAge time.Duration, err error)
	Stop(ctx context.Context) error
}

// eventsStreamConfig is the events stream's configuration. With the
// intake, callers' ids are deduplicated by the intake stream, and the events
// stream only has to remember the owners' write ids across a takeover: a
// window of --stream-duplicates there would keep every write's id (about
// 100 bytes of the server's heap each) for 2 minutes.
func eventsStreamConfig(cfg config.Config) ejs.Config {
	c := cfg.NATS
	if cfg.Series {
		c.Duplicates = min(c.Duplicates, cfg.Intake.ReplayWindow())
	}
	return c
}

// startIntake starts the server-side series intake, when configured; nil
// otherwise (events are stored as they are).
func (g *Gateway) startIntake(ctx context.Context) (service.Intake, error) {
	if !g.cfg.Series {
		return nil, nil
	}
	icfg := g.cfg.Intake
	icfg.EventsStream = g.cfg.NATS.Stream
	icfg.Replicas = g.cfg.NATS.Replicas
	// Callers' ids are deduplicated here, within --stream-duplicates.
	icfg.Duplicates = max(icfg.Duplicates, g.cfg.NATS.Duplicates)
	var err error
	if g.intake, err = intake.Start(ctx, g.nc, g.js, icfg, g.log, g.registry,
		intake.CallVia(g.paths.emit.js), intake.WriteVia(g.paths.write.js), intake.AsMember(g.replica.ID)); err != nil {
		return nil, err
	}
	return g.intake, nil
}

// newServers builds the authenticator and the two gRPC servers: the
// public one, and the REST gateway's in-process one.
func (g *Gateway) newServers(analytics *service.Analytics) error {
	cfg, log := g.cfg, g.log
	g.calls = &callTracker{}
	auth, err := authz.New(cfg.Auth, log, g.registry)
	if err != nil {
		return fmt.Errorf("authentication: %w", err)
	}
	g.auth = auth
	if !auth.Enabled() {
		log.Warn("AUTHENTICATION IS DISABLED: every caller is treated as a local administrator; listening on loopback only. Configure --auth-tokens-file, JWT or mTLS to serve other hosts.")
	}

	grpcMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	g.registry.MustRegister(grpcMetrics)
	panicHandler := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.Error("panic in handler", "panic", p)
		return status.Error(codes.Internal, "internal error")
	})
	g.health = health.NewServer()
	guard := newDecodeGuard(cfg.MaxRequestBytes)
	unary := []grpc.UnaryServerInterceptor{g.calls.unary, grpcMetrics.UnaryServerInterceptor(), recovery.UnaryServerInterceptor(panicHandler), guard.unary, auth.UnaryServerInterceptor()}
	serverStats := otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(g.tp), otelgrpc.WithPropagators(telemetry.Propagator))
	register := func(srv grpc.ServiceRegistrar) {
		eventgatev1.RegisterEventServiceServer(srv, g.events)
		eventgatev1.RegisterAnalyticsServiceServer(srv, analytics)
		eventgatev1.RegisterTenantServiceServer(srv, g.tenants)
		eventgatev1.RegisterRulesServiceServer(srv, g.rules.svc)
	}
	newServer := func(extra ...grpc.ServerOption) *grpc.Server {
		opts := append([]grpc.ServerOption{
			grpc.ForceServerCodecV2(guard),
			grpc.MaxRecvMsgSize(transportLimit(cfg.MaxRequestBytes)), // the guard refuses over MaxRequestBytes
			grpc.StatsHandler(serverStats),
			grpc.ChainUnaryInterceptor(unary...),
			grpc.ChainStreamInterceptor(g.calls.stream, grpcMetrics.StreamServerInterceptor(), recovery.StreamServerInterceptor(panicHandler), guard.stream, auth.StreamServerInterceptor()),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		}, extra...)
		srv := grpc.NewServer(opts...)
		register(srv)
		healthpb.RegisterHealthServer(srv, g.health)
		reflection.Register(srv)
		grpcMetrics.InitializeMetrics(srv)
		return srv
	}
	var extra []grpc.ServerOption
	if cfg.TLS.Enabled() {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		g.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if cas := auth.ClientCAs(); cas != nil {
			g.tls.ClientAuth, g.tls.ClientCAs = tls.VerifyClientCertIfGiven, cas
		}
		extra = append(extra, grpc.Creds(credentials.NewTLS(g.tls)))
	}
	g.grpc = newServer(extra...)
	// The REST gateway's own server: reachable only in process, so it needs
	// no transport security; callers authenticate with their bearer token,
	// which the REST gateway forwards.
	g.grpcInproc = newServer()
	// The REST gateway's unary calls: in process, through the same
	// interceptors and stats handler (see restConn).
	g.restUnary = (&inprocgrpc.Channel{}).
		WithServerUnaryInterceptor(chainUnary(unary...)).
		WithServerStatsHandler(serverStats).
		WithClientStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(g.tp), otelgrpc.WithPropagators(telemetry.Propagator))).
		WithCloner(copier{})
	register(g.restUnary)
	return nil
}

// newReadiness is what /readyz checks: the stream, the store, and that the
// ingest keeps up.
func (g *Gateway) newReadiness() *readiness {
	cfg := g.cfg
	return newReadiness(map[string]func(context.Context) error{
		"jetstream": func(ctx context.Context) error {
			_, err := g.js.Stream(ctx, cfg.NATS.Stream)
			return err
		},
		"clickhouse": func(ctx context.Context) error { return g.store.Ping(ctx) },
		"ingest":     g.replica.ingestCheck(g.ingest, cfg.ReadyMaxIngestLag),
	})
}

// newHTTP builds the HTTP server. The REST gateway is a client of the gRPC
// services through restConn: unary calls in process, streams over an
// in-memory connection to the in-process gRPC server; every interceptor
// runs for REST too.
func (g *Gateway) newHTTP(ctx context.Context) error {
	g.inproc = bufconn.Listen(1 << 20)
	var err error
	g.proxy, err = grpc.NewClient("passthrough:///eventgate-inproc",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return g.inproc.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(g.tp), otelgrpc.WithPropagators(telemetry.Propagator))),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(g.cfg.MaxRequestBytes), grpc.MaxCallRecvMsgSize(64<<20)),
	)
	if err != nil {
		return fmt.Errorf("rest proxy connection: %w", err)
	}
	g.rest = restConn{unary: g.restUnary, stream: g.proxy}
	handler, err := newHTTPHandler(ctx, g)
	if err != nil {
		return err
	}
	g.httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	return nil
}

// Serve serves gRPC on grpcLis and HTTP on httpLis until ctx ends, then
// shuts down gracefully within the configured bound.
func (g *Gateway) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	g.log.Info("eventgate serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(), "version", Version)
	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() error { return g.grpc.Serve(grpcLis) })
	eg.Go(func() error { return g.grpcInproc.Serve(g.inproc) })
	if g.tls != nil {
		httpLis = tls.NewListener(httpLis, g.tls.Clone())
	}
	eg.Go(func() error {
		if err := g.httpSrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	eg.Go(func() error { g.watchHealth(ectx); return nil })
	eg.Go(func() error {
		<-ectx.Done()
		g.stop()
		return nil
	})
	err := eg.Wait()
	g.Close()
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// watchHealth keeps the gRPC health service in step with readiness.
func (g *Gateway) watchHealth(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if _, ok := g.ready.check(ctx); !ok {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		g.health.SetServingStatus("", st)
		g.health.SetServingStatus(eventgatev1.EventService_ServiceDesc.ServiceName, st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Run opens the configured listeners and serves until ctx ends. Without
// authentication it listens on loopback only, and refuses any other address.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	goLimit := TuneRuntime(cfg, log)
	idleCtx, stopIdle := context.WithCancel(ctx)
	defer stopIdle()
	go releaseWhenIdle(idleCtx, log)
	var budget *budgetFollower
	if b, ok := newMemoryBudget(cfg, goLimit); ok {
		budget = newBudgetFollower(b, log)
		go budget.run(idleCtx)
		log.Info("memory budget", "budgetMiB", b.budget>>20, "goLimitMiB", b.ceiling>>20, "goLimitFloorMiB", b.floor>>20)
	}
	grpcAddr, err := BindAddr(cfg.GRPCAddr, cfg.Auth.Enabled())
	if err != nil {
		return fmt.Errorf("grpc-addr: %w", err)
	}
	httpAddr, err := BindAddr(cfg.HTTPAddr, cfg.Auth.Enabled())
	if err != nil {
		return fmt.Errorf("http-addr: %w", err)
	}
	if cfg.NATS.URL == "" && cfg.NATS.Listen != "" {
		// The embedded NATS port has no eventgate authorization at all.
		if _, err := BindAddr(cfg.NATS.Listen, false); err != nil {
			return fmt.Errorf("nats-listen: %w", err)
		}
	}
	grpcLis, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return fmt.Errorf("grpc listener: %w", err)
	}
	httpLis, err := net.Listen("tcp", httpAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("http listener: %w", err)
	}
	if cfg.DebugAddr != "" {
		stop, err := serveDebug(cfg.DebugAddr, log)
		if err != nil {
			grpcLis.Close()
			httpLis.Close()
			return err
		}
		defer stop()
	}
	g, err := New(ctx, cfg, log)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	if budget != nil {
		g.registry.MustRegister(budget.collectors()...)
	}
	return g.Serve(ctx, grpcLis, httpLis)
}

// newGoCollector exports the Go runtime's metrics, and beside the default
// ones the processor time by class (go_cpu_classes_*_cpu_seconds_total):
// how much of the process's CPU the garbage collector takes
// (go_cpu_classes_gc_total_cpu_seconds_total), which the soft memory limit
// trades against memory; and the heap the last collection found live and
// the heap's goal for the next (go_gc_heap_live_bytes,
// go_gc_heap_goal_bytes): heap in use also counts what has died since, so
// the live heap is what the gateway holds.
func newGoCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^(/cpu/classes/.*|/gc/heap/(live|goal):bytes)$`)}))
}

// serveDebug serves Go's pprof profiles on addr, which must be a loopback
// address: profiles carry no authorization. stop closes the listener.
func serveDebug(addr string, log *slog.Logger) (stop func(), err error) {
	if addr, err = BindAddr(addr, false); err != nil {
		return nil, fmt.Errorf("debug-addr: %w", err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug listener", "err", err)
		}
	}()
	log.Info("pprof profiles served", "addr", lis.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// ErrUnauthenticatedBind refuses a non-loopback address without authentication.
var ErrUnauthenticatedBind = errors.New("refusing to serve a non-loopback address without authentication")

// BindAddr returns the address to listen on. An address without a host
// (":9090") means every interface when authentication is configured and
// loopback when it is not; an explicit non-loopback host without
// authentication is refused.
func BindAddr(addr string, authenticated bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if authenticated {
		return addr, nil
	}
	if host == "" {
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	if host == "localhost" {
		return addr, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return addr, nil
	}
	return "", fmt.Errorf("%w: %s (configure --auth-tokens-file, JWT or mTLS, or bind to 127.0.0.1)", ErrUnauthenticatedBind, addr)
}

// readiness runs named checks, caching the answer briefly.
type readiness struct {
	checks map[string]func(context.Context) error
	mu     sync.Mutex
	at     time.Time
	last   map[string]string
	ok     bool
}

func newReadiness(checks map[string]func(context.Context) error) *readiness {
	return &readiness{checks: checks}
}

func (r *readiness) check(ctx context.Context) (map[string]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) < time.Second && r.last != nil {
		return r.last, r.ok
	}
	res := make(map[string]string, len(r.checks))
	ok := true
	for name, c := range r.checks {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c(cctx)
		cancel()
		if err != nil {
			res[name] = err.Error()
			ok = false
		} else {
			res[name] = "ok"
		}
	}
	r.at, r.last, r.ok = time.Now(), res, ok
	return res, ok
}
