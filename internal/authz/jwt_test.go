package authz

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	testIssuer   = "https://idp.example"
	testAudience = "eventgate"
)

type testKeys struct {
	rsa, rsaOther *rsa.PrivateKey
	ec            *ecdsa.PrivateKey
	hmac          []byte
}

var (
	keysOnce sync.Once
	keys     testKeys
)

func genKeys(t *testing.T) testKeys {
	t.Helper()
	keysOnce.Do(func() {
		var err error
		if keys.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if keys.rsaOther, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
		if keys.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			panic(err)
		}
		keys.hmac = []byte("0123456789abcdef0123456789abcdef-test-secret")
	})
	return keys
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PublicKey) map[string]string {
	return map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": b64u(k.N.Bytes()), "e": b64u(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]string {
	b, _ := k.Bytes()
	return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64u(b[1:33]), "y": b64u(b[33:])}
}

func jwksJSON(t *testing.T, ks ...map[string]string) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{"keys": ks})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// sign makes a JWT; kid "" leaves the header out.
func sign(t *testing.T, m jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func baseClaims(now time.Time) jwt.MapClaims {
	return jwt.MapClaims{
		"iss": testIssuer, "aud": testAudience, "sub": "ci@shop",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		ClaimGrants: []map[string]any{{"tenantType": "project", "tenantName": "shop", "verbs": []string{"emit", "watch"}}},
	}
}

func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func jwtAuthenticator(t *testing.T, cfg JWTConfig, logs *bytes.Buffer) *Authenticator {
	t.Helper()
	k := genKeys(t)
	if cfg.KeysFile == "" && cfg.KeysURL == "" {
		cfg.KeysFile = writeFile(t, "jwks.json", jwksJSON(t,
			rsaJWK("rsa-1", &k.rsa.PublicKey),
			ecJWK("ec-1", &k.ec.PublicKey),
			map[string]string{"kty": "oct", "kid": "hmac-1", "k": b64u(k.hmac)},
		))
	}
	if cfg.Issuer == "" {
		cfg.Issuer, cfg.Audience = testIssuer, testAudience
	}
	var log *slog.Logger
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	a, err := New(Config{JWT: cfg}, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestJWT(t *testing.T) {
	k := genKeys(t)
	var logs bytes.Buffer
	a := jwtAuthenticator(t, JWTConfig{PlatformKeyIDs: []string{"ec-1"}}, &logs)
	now := time.Now()
	c := baseClaims(now)
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&k.rsa.PublicKey))})
	wide := []map[string]any{{"tenantType": "project", "tenantName": "*", "verbs": []string{"watch"}}}

	tests := []struct {
		name string
		tok  string
		want string // "" valid, else a substring of the error
	}{
		{"RS256", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, c), ""},
		{"ES256", sign(t, jwt.SigningMethodES256, "ec-1", k.ec, c), ""},
		{"HS256", sign(t, jwt.SigningMethodHS256, "hmac-1", k.hmac, c), ""},
		{"HS256 without kid: the only HMAC key", sign(t, jwt.SigningMethodHS256, "", k.hmac, c), ""},
		{"expired", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "exp", now.Add(-time.Minute).Unix())), "expired"},
		{"expired within leeway", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "exp", now.Add(-10*time.Second).Unix())), ""},
		{"no expiry", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "exp", nil)), "lacks a required claim"},
		{"not yet valid", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "nbf", now.Add(time.Hour).Unix())), "not valid yet"},
		{"issued in the future", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "iat", now.Add(time.Hour).Unix())), "not valid yet"},
		{"wrong issuer", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "iss", "https://evil.example")), "wrong issuer"},
		{"no issuer", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "iss", nil)), "lacks a required claim"},
		{"wrong audience", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "aud", "other")), "wrong audience"},
		{"audience list", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "aud", []string{"other", testAudience})), ""},
		{"no subject", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, "sub", nil)), "no subject"},
		{"wrongly signed", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsaOther, c), "signature is not valid"},
		{"unknown kid", sign(t, jwt.SigningMethodRS256, "rsa-2", k.rsaOther, c), "not valid"},
		{"ES256 with the RSA key's id", sign(t, jwt.SigningMethodES256, "rsa-1", k.ec, c), "not valid"},
		{"HS256 with a wrong secret", sign(t, jwt.SigningMethodHS256, "hmac-1", []byte("another-secret-another-secret-xx"), c), "signature is not valid"},
		{"alg none", sign(t, jwt.SigningMethodNone, "rsa-1", jwt.UnsafeAllowNoneSignatureType, c), "not valid"},
		{"alg none without signature", strings.TrimSuffix(sign(t, jwt.SigningMethodNone, "", jwt.UnsafeAllowNoneSignatureType, c), "."), "not recognized"},
		// Algorithm confusion: the RSA public key (PEM or DER) as an HMAC secret.
		{"RS256 key as HS256 secret (PEM)", sign(t, jwt.SigningMethodHS256, "rsa-1", rsaPEM, c), "not valid"},
		{"RS256 key as HS256 secret (DER)", sign(t, jwt.SigningMethodHS256, "rsa-1", must(x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)), c), "not valid"},
		{"RS384 not accepted", sign(t, jwt.SigningMethodRS384, "rsa-1", k.rsa, c), "not valid"},
		{"malformed", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.bm9wZQ", "not valid"},
		{"tampered payload", tamper(sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, c)), "not valid"},
		{"kid not a string", signHeader(t, jwt.SigningMethodRS256, map[string]any{"kid": 7}, k.rsa, c), "not valid"},
		// Grants in claims obey the same rules as the tokens file.
		{"wide grant without platform", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, ClaimGrants, wide)), "only for platform principals"},
		{"platform claim from an untrusted key", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, ClaimGrants, wide, ClaimPlatform, true)), "only for platform principals"},
		{"platform claim from a trusted key", sign(t, jwt.SigningMethodES256, "ec-1", k.ec, with(c, ClaimGrants, wide, ClaimPlatform, true)), ""},
		{"bad verb", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, ClaimGrants, []map[string]any{{"tenantType": "project", "tenantName": "a", "verbs": []string{"rm"}}})), "unknown verb"},
		{"bad grants shape", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, with(c, ClaimGrants, "all")), "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := a.Authenticate(bearerCtx(tt.tok))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("accepted as %+v; want %q", p, tt.want)
			case tt.want != "" && (!errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v; want Unauthenticated with %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), tt.tok):
				t.Fatalf("the error holds the token")
			}
			if err == nil && p.Name != "ci@shop" {
				t.Errorf("principal %q", p.Name)
			}
		})
	}
	if strings.Contains(logs.String(), "eyJ") {
		t.Errorf("a token was logged: %s", logs.String())
	}

	// The claims become the principal.
	p, err := a.Authenticate(bearerCtx(sign(t, jwt.SigningMethodES256, "ec-1", k.ec, with(c,
		ClaimGrants, append(wide, map[string]any{"tenantType": "project", "tenantName": "shop", "kinds": []map[string]string{{"group": "apps", "kind": "Deployment"}}, "verbs": []string{"emit"}}),
		ClaimPlatform, true,
		ClaimDefaultTenant, map[string]string{"type": "project", "name": "shop"}))))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Platform || len(p.Grants) != 2 || p.DefaultTenant == nil || *p.DefaultTenant != (Tenant{"project", "shop"}) {
		t.Errorf("principal %+v", p)
	}
	if err := p.AuthorizeEmit(Tenant{"project", "shop"}, "apps", "Deployment"); err != nil {
		t.Error(err)
	}
	if err := p.AuthorizeEmit(Tenant{"project", "shop"}, "", "Pod"); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("emit Pod: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	payload = bytes.Replace(payload, []byte(`"shop"`), []byte(`"blog"`), 1)
	parts[1] = base64.RawURLEncoding.EncodeToString(payload)
	return strings.Join(parts, ".")
}

func signHeader(t *testing.T, m jwt.SigningMethod, hdr map[string]any, key any, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	for k, v := range hdr {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWTConfigInvalid(t *testing.T) {
	k := genKeys(t)
	file := writeFile(t, "jwks.json", jwksJSON(t, rsaJWK("rsa-1", &k.rsa.PublicKey)))
	tests := []struct {
		name string
		cfg  JWTConfig
		want string
	}{
		{"no issuer", JWTConfig{KeysFile: file, Audience: "a"}, "issuer and audience are required"},
		{"no audience", JWTConfig{KeysFile: file, Issuer: "i"}, "issuer and audience are required"},
		{"bad algorithm", JWTConfig{KeysFile: file, Issuer: "i", Audience: "a", Algorithms: []string{"none"}}, "not supported"},
		{"leeway", JWTConfig{KeysFile: file, Issuer: "i", Audience: "a", Leeway: time.Hour}, "leeway"},
		{"refresh", JWTConfig{KeysURL: "https://idp.example/jwks", Issuer: "i", Audience: "a", RefreshInterval: time.Second}, "refreshInterval"},
		{"plain http", JWTConfig{KeysURL: "http://idp.example/jwks", Issuer: "i", Audience: "a"}, "must be https"},
		{"short secret", JWTConfig{SecretFile: writeFile(t, "s", "short"), Issuer: "i", Audience: "a"}, "at least 32 bytes"},
		{"duplicate kid", JWTConfig{KeysFile: writeFile(t, "j.json", jwksJSON(t, rsaJWK("x", &k.rsa.PublicKey), ecJWK("x", &k.ec.PublicKey))), Issuer: "i", Audience: "a"}, "used by two keys"},
		{"weak RSA", JWTConfig{KeysFile: writeFile(t, "j.json", jwksJSON(t, map[string]string{"kty": "RSA", "kid": "w", "n": b64u(big.NewInt(1<<62 + 1).Bytes()), "e": "AQAB"})), Issuer: "i", Audience: "a"}, "at least 2048 bits"},
		{"bad JSON", JWTConfig{KeysFile: writeFile(t, "j.json", "{"), Issuer: "i", Audience: "a"}, "key set"},
		{"no keys", JWTConfig{KeysFile: writeFile(t, "j.json", `{"keys":[]}`), Issuer: "i", Audience: "a"}, "no keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{JWT: tt.cfg}, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestExampleJWKS(t *testing.T) {
	data := must(os.ReadFile("testdata/jwks.json"))
	ks, err := parseJWKS(data, false)
	if err != nil || len(ks) != 2 || ks[0].alg != AlgRS256 || ks[1].alg != AlgES256 {
		t.Fatalf("%+v, %v", ks, err)
	}
}

func TestJWTSecretFile(t *testing.T) {
	k := genKeys(t)
	a := jwtAuthenticator(t, JWTConfig{SecretFile: writeFile(t, "secret", string(k.hmac)+"\n"), SecretKeyID: "s1", Algorithms: []string{AlgHS256}}, nil)
	c := baseClaims(time.Now())
	if _, err := a.Authenticate(bearerCtx(sign(t, jwt.SigningMethodHS256, "s1", k.hmac, c))); err != nil {
		t.Fatal(err)
	}
	// RS256 is not among the configured algorithms.
	if _, err := a.Authenticate(bearerCtx(sign(t, jwt.SigningMethodRS256, "s1", k.rsa, c))); !errors.Is(err, ErrUnauthenticated) {
		t.Fatal(err)
	}
}

// A key set from a URL: refreshed on an unknown key id at most once a
// minute, and every RefreshInterval; symmetric keys are refused there.
func TestJWTKeysURL(t *testing.T) {
	k := genKeys(t)
	var (
		mu      sync.Mutex
		body    = jwksJSON(t, rsaJWK("rsa-1", &k.rsa.PublicKey))
		fetches atomic.Int32
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if body == "" {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	now := time.Now()
	clock := now
	var clockMu sync.Mutex
	a := jwtAuthenticator(t, JWTConfig{KeysURL: srv.URL}, nil)
	a.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }
	if fetches.Load() != 1 {
		t.Fatalf("%d fetches at start", fetches.Load())
	}
	c := func() jwt.MapClaims { return baseClaims(a.now()) }
	if _, err := a.Authenticate(bearerCtx(sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, c()))); err != nil {
		t.Fatal(err)
	}
	// Rotation: the provider adds ec-2.
	mu.Lock()
	body = jwksJSON(t, rsaJWK("rsa-1", &k.rsa.PublicKey), ecJWK("ec-2", &k.ec.PublicKey))
	mu.Unlock()
	advance(10 * time.Second)
	if _, err := a.Authenticate(bearerCtx(sign(t, jwt.SigningMethodES256, "ec-2", k.ec, c()))); err == nil {
		t.Fatal("unknown kid accepted before a refetch was due")
	}
	if fetches.Load() != 1 {
		t.Fatalf("refetched within a minute: %d", fetches.Load())
	}
	advance(2 * time.Minute)
	if _, err := a.Authenticate(bearerCtx(sign(t, jwt.SigningMethodES256, "ec-2", k.ec, c()))); err != nil {
		t.Fatalf("after the refetch: %v", err)
	}
	if fetches.Load() != 2 {
		t.Fatalf("%d fetches", fetches.Load())
	}
	// The provider drops rsa-1; after RefreshInterval the set is refetched.
	mu.Lock()
	body = jwksJSON(t, ecJWK("ec-2", &k.ec.PublicKey))
	mu.Unlock()
	advance(11 * time.Minute)
	if _, err := a.Authenticate(bearerCtx(sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, c()))); err == nil {
		t.Fatal("a key dropped by the provider still verifies after the refresh interval")
	}
	// A failing provider keeps the last keys.
	mu.Lock()
	body = ""
	mu.Unlock()
	advance(11 * time.Minute)
	if _, err := a.Authenticate(bearerCtx(sign(t, jwt.SigningMethodES256, "ec-2", k.ec, c()))); err != nil {
		t.Fatalf("provider down: %v", err)
	}

	octSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(jwksJSON(t, map[string]string{"kty": "oct", "kid": "h", "k": b64u(k.hmac)})))
	}))
	defer octSrv.Close()
	if _, err := New(Config{JWT: JWTConfig{KeysURL: octSrv.URL, Issuer: "i", Audience: "a"}}, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "only accepted from a local file") {
		t.Fatalf("oct key from a URL: %v", err)
	}
}
