package authz

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// AdminName is the name of the implicit local administrator.
const AdminName = "local-admin"

// recorder counts and logs denials. A nil recorder does nothing.
type recorder struct {
	log     *slog.Logger
	denials *prometheus.CounterVec
}

func newRecorder(log *slog.Logger, reg prometheus.Registerer) *recorder {
	r := &recorder{
		log: log,
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventgate_authz_denials_total",
			Help: "Requests refused by authentication or authorization, by reason and verb.",
		}, []string{"reason", "verb"}),
	}
	if reg != nil {
		reg.MustRegister(r.denials)
	}
	return r
}

func (r *recorder) denied(principal string, v Verb, reason, what string) {
	if r == nil {
		return
	}
	r.denials.WithLabelValues(reason, string(v)).Inc()
	r.log.Info("authorization denied", "principal", principal, "verb", string(v), "reason", reason, "what", what)
}

func (r *recorder) unauthenticated(method, addr string, err error) {
	r.denials.WithLabelValues(ReasonUnauthenticated, "none").Inc()
	r.log.Info("authentication failed", "method", method, "peer", addr, "err", err.Error())
}

// Authenticator turns a call's credentials into a Principal.
type Authenticator struct {
	enabled    bool
	admin      *Principal
	principals map[string]*Principal // from the tokens file
	tokens     map[[sha256.Size]byte]*Principal
	jwt        *jwtVerifier
	mtls       *mtlsVerifier
	exempt     []string
	rec        *recorder
	log        *slog.Logger
	now        func() time.Time
}

// New builds an Authenticator from cfg: it reads the tokens file, the JWT
// keys (fetching a key URL once) and the mTLS CA. Denials are counted in
// reg (nil: not registered) and logged on log.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Authenticator, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{
		enabled: cfg.Enabled(),
		exempt:  cfg.Exempt,
		rec:     newRecorder(log, reg),
		log:     log,
		now:     time.Now,
	}
	if a.exempt == nil {
		a.exempt = DefaultExempt
	}
	for _, e := range a.exempt {
		if !strings.HasPrefix(e, "/") || len(e) < 2 {
			return nil, fmt.Errorf("exempt: %q is not a gRPC method prefix such as \"/grpc.health.v1.Health/\"", e)
		}
	}
	a.admin = &Principal{Name: AdminName, Admin: true, Platform: true, rec: a.rec}
	if cfg.TokensFile != "" {
		var err error
		if a.principals, a.tokens, err = loadTokens(cfg.TokensFile); err != nil {
			return nil, err
		}
		for _, p := range a.principals {
			p.rec = a.rec
		}
	}
	if cfg.MTLS.Enabled() {
		if cfg.TokensFile == "" {
			return nil, errors.New("mtls: a tokens file is required to define the principals certificates map to")
		}
		var err error
		if a.mtls, err = newMTLSVerifier(cfg.MTLS, a.principals); err != nil {
			return nil, err
		}
	}
	if cfg.JWT.Enabled() {
		var err error
		if a.jwt, err = newJWTVerifier(context.Background(), cfg.JWT, log, func() time.Time { return a.now() }); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Enabled reports whether authentication is configured. When it is not,
// every caller is the local administrator (the gateway must then listen on
// loopback only).
func (a *Authenticator) Enabled() bool { return a.enabled }

// ClientCAs is the pool client certificates are verified against, for the
// gRPC server's tls.Config (ClientAuth: tls.VerifyClientCertIfGiven, so
// bearer callers need no certificate); nil without mTLS.
func (a *Authenticator) ClientCAs() *x509.CertPool {
	if a.mtls == nil {
		return nil
	}
	return a.mtls.pool
}

// Authenticate returns the caller of the gRPC call in ctx: from the
// "authorization: Bearer …" metadata (a JWT when it has three dot-separated
// segments and JWTs are configured, else a token of the tokens file), or,
// without one, from a verified client certificate. Errors wrap
// ErrUnauthenticated and never contain the credential.
func (a *Authenticator) Authenticate(ctx context.Context) (*Principal, error) {
	if !a.enabled {
		return a.admin, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	switch vals := md.Get("authorization"); len(vals) {
	case 0:
	case 1:
		return a.bearer(ctx, vals[0])
	default:
		return nil, fmt.Errorf("%w: several authorization headers", ErrUnauthenticated)
	}
	if a.mtls != nil {
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				return a.mtls.principal(ti.State, a.now())
			}
		}
	}
	return nil, fmt.Errorf("%w: no credentials (bearer token or client certificate)", ErrUnauthenticated)
}

func (a *Authenticator) bearer(ctx context.Context, h string) (*Principal, error) {
	scheme, tok, _ := strings.Cut(strings.TrimSpace(h), " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil, fmt.Errorf("%w: authorization must be \"Bearer <token>\"", ErrUnauthenticated)
	}
	if len(tok) > maxTokenBytes {
		return nil, fmt.Errorf("%w: bearer token too long", ErrUnauthenticated)
	}
	if a.jwt != nil && looksLikeJWT(tok) {
		return a.jwt.verify(ctx, tok, a.rec)
	}
	if a.tokens == nil {
		return nil, fmt.Errorf("%w: bearer token not recognized", ErrUnauthenticated)
	}
	// The map is keyed by the token's hash: what a lookup's timing could
	// reveal is about hashes, which do not help to forge a token.
	p, ok := a.tokens[sha256.Sum256([]byte(tok))]
	if !ok {
		return nil, fmt.Errorf("%w: bearer token not recognized", ErrUnauthenticated)
	}
	return p, nil
}

func looksLikeJWT(tok string) bool {
	parts := strings.Split(tok, ".")
	return len(parts) == 3 && parts[0] != "" && parts[1] != ""
}

func (a *Authenticator) exempted(method string) bool {
	for _, e := range a.exempt {
		if strings.HasPrefix(method, e) {
			return true
		}
	}
	return false
}

// authenticate is what both interceptors do: the context to call the
// handler with, or the status to answer.
func (a *Authenticator) authenticate(ctx context.Context, method string) (context.Context, error) {
	if a.enabled && a.exempted(method) {
		return ctx, nil
	}
	p, err := a.Authenticate(ctx)
	if err != nil {
		addr := ""
		if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
			addr = pr.Addr.String()
		}
		a.rec.unauthenticated(method, addr, err)
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return NewContext(ctx, p), nil
}

// UnaryServerInterceptor authenticates every unary call but the exempt ones
// and puts the Principal in its context.
func (a *Authenticator) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.authenticate(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor authenticates every streaming call but the exempt
// ones and puts the Principal in its context.
func (a *Authenticator) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.authenticate(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }
