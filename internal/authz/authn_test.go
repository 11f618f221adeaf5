package authz

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// A test PKI: a CA, and certificates it (or another CA) issues.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key))
	cert := must(x509.ParseCertificate(der))
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

type certOpt func(*x509.Certificate)

func (ca *testCA) issue(t *testing.T, cn string, opts ...certOpt) tls.Certificate {
	t.Helper()
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber: must(rand.Int(rand.Reader, big.NewInt(1<<62))),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, o := range opts {
		o(tmpl)
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: must(x509.ParseCertificate(der))}
}

func peerCtx(ctx context.Context, certs ...tls.Certificate) context.Context {
	var chain []*x509.Certificate
	for _, c := range certs {
		chain = append(chain, c.Leaf)
	}
	return peer.NewContext(ctx, &peer.Peer{
		Addr:     &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: chain}},
	})
}

const mtlsTokens = `
principals:
  - name: node-agent
    grants: [{tenantType: organization, tenantName: acme, kinds: [{kind: Node}], verbs: [emit]}]
  - name: shop-ci
    tokens: ["%s"]
    grants: [{tenantType: project, tenantName: shop, verbs: [emit, watch, query]}]
  - name: spiffe-svc
    grants: [{tenantType: user, tenantName: u, verbs: [watch]}]
`

func mtlsConfig(t *testing.T, ca *testCA) Config {
	return Config{
		TokensFile: writeFile(t, "tokens.yaml", strings.Replace(mtlsTokens, "%s", HashToken("shop-token"), 1)),
		MTLS: MTLSConfig{
			CAFile: writeFile(t, "ca.pem", string(ca.pem)),
			Identities: []Identity{
				{CN: "node-agent-1", Principal: "node-agent"},
				{DNS: "ci.shop.example", Principal: "shop-ci"},
				{Email: "ci@shop.example", Principal: "shop-ci"},
				{URI: "spiffe://example.org/svc", Principal: "spiffe-svc"},
			},
		},
	}
}

func TestMTLS(t *testing.T) {
	ca, other := newCA(t, "test CA"), newCA(t, "other CA")
	a, err := New(mtlsConfig(t, ca), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.ClientCAs() == nil {
		t.Fatal("no client CAs")
	}
	spiffe := must(url.Parse("spiffe://example.org/svc"))
	tests := []struct {
		name string
		cert tls.Certificate
		want string // principal, or "!" and a substring of the error
	}{
		{"CN", ca.issue(t, "node-agent-1"), "node-agent"},
		{"DNS SAN", ca.issue(t, "whatever", func(c *x509.Certificate) { c.DNSNames = []string{"ci.shop.example"} }), "shop-ci"},
		{"email SAN", ca.issue(t, "", func(c *x509.Certificate) { c.EmailAddresses = []string{"ci@shop.example"} }), "shop-ci"},
		{"URI SAN", ca.issue(t, "", func(c *x509.Certificate) { c.URIs = []*url.URL{spiffe} }), "spiffe-svc"},
		{"two SANs, one principal", ca.issue(t, "", func(c *x509.Certificate) {
			c.DNSNames, c.EmailAddresses = []string{"ci.shop.example"}, []string{"ci@shop.example"}
		}), "shop-ci"},
		{"two principals", ca.issue(t, "node-agent-1", func(c *x509.Certificate) { c.DNSNames = []string{"ci.shop.example"} }), "!several principals"},
		{"unmapped", ca.issue(t, "stranger"), "!no principal"},
		{"CN is not a SAN", ca.issue(t, "ci.shop.example"), "!no principal"},
		{"other CA", other.issue(t, "node-agent-1"), "!not trusted"},
		{"server certificate", ca.issue(t, "node-agent-1", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} }), "!not trusted"},
		{"expired", ca.issue(t, "node-agent-1", func(c *x509.Certificate) { c.NotAfter = time.Now().Add(-time.Minute) }), "!not trusted"},
		{"self-signed lookalike", selfSigned(t, "node-agent-1"), "!not trusted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := a.Authenticate(peerCtx(context.Background(), tt.cert))
			if want, ok := strings.CutPrefix(tt.want, "!"); ok {
				if err == nil || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, %v; want Unauthenticated with %q", p, err, want)
				}
				return
			}
			if err != nil || p.Name != tt.want {
				t.Fatalf("got %v, %v; want %s", p, err, tt.want)
			}
		})
	}
	// A bearer token wins over the certificate.
	p, err := a.Authenticate(peerCtx(bearerCtx("shop-token"), ca.issue(t, "node-agent-1")))
	if err != nil || p.Name != "shop-ci" {
		t.Errorf("bearer with certificate: %v, %v", p, err)
	}
	// No certificate, no token.
	if _, err := a.Authenticate(peerCtx(context.Background())); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("no credentials: %v", err)
	}
}

func selfSigned(t *testing.T, cn string) tls.Certificate {
	ca := newCA(t, cn)
	return tls.Certificate{Certificate: [][]byte{ca.cert.Raw}, PrivateKey: ca.key, Leaf: ca.cert}
}

func TestMTLSConfigInvalid(t *testing.T) {
	ca := newCA(t, "ca")
	cfg := mtlsConfig(t, ca)
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no tokens file", func(c *Config) { c.TokensFile = "" }, "tokens file is required"},
		{"undefined principal", func(c *Config) { c.MTLS.Identities = []Identity{{CN: "x", Principal: "ghost"}} }, `principal "ghost" is not defined`},
		{"two selectors", func(c *Config) { c.MTLS.Identities = []Identity{{CN: "x", DNS: "y", Principal: "shop-ci"}} }, "exactly one of"},
		{"no identities", func(c *Config) { c.MTLS.Identities = nil }, "identities are required"},
		{"not PEM", func(c *Config) { c.MTLS.CAFile = writeFile(t, "ca.pem", "nope") }, "no PEM certificates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			tt.mod(&c)
			if _, err := New(c, nil, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestBearer(t *testing.T) {
	k := genKeys(t)
	tokens := writeFile(t, "tokens.yaml", `
principals:
  - name: opaque
    tokens: ["`+HashToken("opaque-token")+`", "`+HashToken("x.y.z")+`"]
    grants: [{tenantType: project, tenantName: a, verbs: [watch]}]
`)
	onlyTokens := must(New(Config{TokensFile: tokens}, nil, nil))
	bothCfg := Config{TokensFile: tokens, JWT: JWTConfig{KeysFile: writeFile(t, "jwks.json", jwksJSON(t, rsaJWK("rsa-1", &k.rsa.PublicKey))), Issuer: testIssuer, Audience: testAudience}}
	both := must(New(bothCfg, nil, nil))
	jwtTok := sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, baseClaims(time.Now()))

	md := func(vals ...string) context.Context {
		m := metadata.MD{}
		for _, v := range vals {
			m.Append("authorization", v)
		}
		return metadata.NewIncomingContext(context.Background(), m)
	}
	tests := []struct {
		name string
		a    *Authenticator
		ctx  context.Context
		want string // principal, or "!" and a substring of the error
	}{
		{"token", onlyTokens, md("Bearer opaque-token"), "opaque"},
		{"scheme is case-insensitive", onlyTokens, md("bearer opaque-token"), "opaque"},
		{"wrong token", onlyTokens, md("Bearer opaque-tokeN"), "!not recognized"},
		{"token prefix", onlyTokens, md("Bearer opaque"), "!not recognized"},
		{"empty token", onlyTokens, md("Bearer "), "!Bearer <token>"},
		{"basic auth", onlyTokens, md("Basic b3BhcXVlLXRva2Vu"), "!Bearer <token>"},
		{"raw token", onlyTokens, md("opaque-token"), "!Bearer <token>"},
		{"two headers", onlyTokens, md("Bearer opaque-token", "Bearer opaque-token"), "!several authorization headers"},
		{"missing", onlyTokens, context.Background(), "!no credentials"},
		{"JWT-shaped token without JWT config is a token", onlyTokens, md("Bearer x.y.z"), "opaque"},
		{"a JWT without JWT config", onlyTokens, md("Bearer " + jwtTok), "!not recognized"},
		{"JWT", both, md("Bearer " + jwtTok), "ci@shop"},
		{"JWT-shaped token with JWT config is a JWT", both, md("Bearer x.y.z"), "!malformed"},
		{"token with JWT config", both, md("Bearer opaque-token"), "opaque"},
		{"too long", both, md("Bearer " + strings.Repeat("a", maxTokenBytes+1)), "!too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.a.Authenticate(tt.ctx)
			if want, ok := strings.CutPrefix(tt.want, "!"); ok {
				if err == nil || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, %v; want Unauthenticated with %q", p, err, want)
				}
				if strings.Contains(err.Error(), "opaque-token") {
					t.Fatal("the error holds the token")
				}
				return
			}
			if err != nil || p.Name != tt.want {
				t.Fatalf("got %v, %v; want %s", p, err, tt.want)
			}
		})
	}
}

// recordingServer answers health checks and records the principal.
type recordingServer struct {
	healthpb.UnimplementedHealthServer
	seen chan string
}

func (s *recordingServer) record(ctx context.Context) {
	name := "<none>"
	if p, ok := FromContext(ctx); ok {
		name = p.Name
	}
	s.seen <- name
}

func (s *recordingServer) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.record(ctx)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s *recordingServer) Watch(_ *healthpb.HealthCheckRequest, st grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	s.record(st.Context())
	return st.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// TestInterceptorsOverTLS runs a real gRPC server on loopback with TLS
// (client certificates optional) and the interceptors: the principal
// reaches handlers of unary and streaming calls; calls without valid
// credentials are refused with Unauthenticated, counted and logged without
// the token.
func TestInterceptorsOverTLS(t *testing.T) {
	ca := newCA(t, "test CA")
	cfg := mtlsConfig(t, ca)
	cfg.Exempt = []string{} // the health service stands in for the API here
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	a, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	serverCert := ca.issue(t, "server", func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	})
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{serverCert},
			ClientAuth:   tls.VerifyClientCertIfGiven,
			ClientCAs:    a.ClientCAs(),
			MinVersion:   tls.VersionTLS13,
		})),
		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()),
	)
	rs := &recordingServer{seen: make(chan string, 4)}
	healthpb.RegisterHealthServer(srv, rs)
	lis := must(net.Listen("tcp", "127.0.0.1:0"))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	dial := func(certs ...tls.Certificate) healthpb.HealthClient {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS13,
		})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return healthpb.NewHealthClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	withToken := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	call := func(c healthpb.HealthClient, ctx context.Context) (string, codes.Code) {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return "", status.Code(err)
		}
		return <-rs.seen, codes.OK
	}
	stream := func(c healthpb.HealthClient, ctx context.Context) (string, codes.Code) {
		st, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		if err != nil {
			return "", status.Code(err)
		}
		return <-rs.seen, codes.OK
	}

	withCert := dial(ca.issue(t, "node-agent-1"))
	anon := dial()
	strangerCert := dial(ca.issue(t, "stranger"))
	tests := []struct {
		name string
		fn   func(healthpb.HealthClient, context.Context) (string, codes.Code)
		c    healthpb.HealthClient
		ctx  context.Context
		want string
		code codes.Code
	}{
		{"unary, certificate", call, withCert, ctx, "node-agent", codes.OK},
		{"stream, certificate", stream, withCert, ctx, "node-agent", codes.OK},
		{"unary, token", call, anon, withToken("shop-token"), "shop-ci", codes.OK},
		{"stream, token", stream, anon, withToken("shop-token"), "shop-ci", codes.OK},
		{"unary, nothing", call, anon, ctx, "", codes.Unauthenticated},
		{"stream, nothing", stream, anon, ctx, "", codes.Unauthenticated},
		{"unary, bad token", call, anon, withToken("sekrit-guess"), "", codes.Unauthenticated},
		{"stream, unmapped certificate", stream, strangerCert, ctx, "", codes.Unauthenticated},
	}
	for _, tt := range tests {
		got, code := tt.fn(tt.c, tt.ctx)
		if got != tt.want || code != tt.code {
			t.Errorf("%s: %q, %v; want %q, %v", tt.name, got, code, tt.want, tt.code)
		}
	}
	if n := counterValue(a.rec.denials.WithLabelValues(ReasonUnauthenticated, "none")); n != 4 {
		t.Errorf("%v unauthenticated denials counted, want 4", n)
	}
	if strings.Contains(logs.String(), "sekrit-guess") {
		t.Errorf("the token was logged: %s", logs.String())
	}
	if !strings.Contains(logs.String(), "/grpc.health.v1.Health/Check") {
		t.Errorf("the method was not logged: %s", logs.String())
	}
}

// With the default exemptions, health checks need no credentials while
// other methods do; with no authentication configured, every caller is the
// local administrator.
func TestInterceptorExemptAndDisabled(t *testing.T) {
	enabled := must(New(Config{TokensFile: writeFile(t, "t.yaml", "principals: []\n")}, nil, nil))
	disabled := must(New(Config{}, nil, nil))
	var got string
	handler := func(ctx context.Context, _ any) (any, error) {
		got = "<none>"
		if p, ok := FromContext(ctx); ok {
			got = p.Name
		}
		return nil, nil
	}
	tests := []struct {
		a      *Authenticator
		method string
		want   string
		code   codes.Code
	}{
		{enabled, "/grpc.health.v1.Health/Check", "<none>", codes.OK},
		{enabled, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "", codes.Unauthenticated},
		{enabled, "/eventgate.v1.EventService/Emit", "", codes.Unauthenticated},
		{disabled, "/eventgate.v1.EventService/Emit", AdminName, codes.OK},
		{disabled, "/grpc.health.v1.Health/Check", AdminName, codes.OK},
	}
	for _, tt := range tests {
		got = ""
		_, err := tt.a.UnaryServerInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: tt.method}, handler)
		if got != tt.want || status.Code(err) != tt.code {
			t.Errorf("%s (enabled %v): %q, %v; want %q, %v", tt.method, tt.a.Enabled(), got, err, tt.want, tt.code)
		}
	}
}

func TestDenialsCounted(t *testing.T) {
	var logs bytes.Buffer
	a := must(New(Config{TokensFile: "testdata/tokens.yaml"}, slog.New(slog.NewTextHandler(&logs, nil)), prometheus.NewRegistry()))
	p := must(a.Authenticate(bearerCtx("shop-token-5b0f6c1e9a")))
	_ = p.AuthorizeEmit(Tenant{"project", "blog"}, "", "Pod")
	_, _ = p.Scope(VerbQuery, &Tenant{"project", "blog"})
	_, _ = p.Scope(VerbQuery, &Tenant{"project", "shop"}) // allowed: not counted
	if n := counterValue(a.rec.denials.WithLabelValues(ReasonTenant, "emit")); n != 1 {
		t.Errorf("emit denials %v", n)
	}
	if n := counterValue(a.rec.denials.WithLabelValues(ReasonTenant, "query")); n != 1 {
		t.Errorf("query denials %v", n)
	}
	if !strings.Contains(logs.String(), "principal=shop-ci") || strings.Contains(logs.String(), "shop-token") {
		t.Errorf("logs: %s", logs.String())
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
