package authz

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWT claims eventgate reads besides the registered ones ("sub" names the
// principal; "iss", "aud", "exp" are required; "nbf", "iat" are checked).
const (
	// ClaimGrants is a list of grants, e.g.
	// [{"tenantType":"project","tenantName":"shop","verbs":["watch"]}].
	ClaimGrants = "eventgate.io/grants"
	// ClaimPlatform marks a platform principal; honoured only for tokens
	// signed by a key in JWTConfig.PlatformKeyIDs.
	ClaimPlatform = "eventgate.io/platform"
	// ClaimDefaultTenant is {"type":…,"name":…}, the default Emit tenant.
	ClaimDefaultTenant = "eventgate.io/defaultTenant"
)

// Supported JWT algorithms.
const (
	AlgRS256 = "RS256"
	AlgES256 = "ES256"
	AlgHS256 = "HS256"
)

const (
	defaultLeeway      = 30 * time.Second
	maxLeeway          = 5 * time.Minute
	defaultRefresh     = 10 * time.Minute
	minRefresh         = time.Minute
	maxRefresh         = 24 * time.Hour
	unknownKidInterval = time.Minute // bound on refetches for unknown key ids
	failedFetchBackoff = 15 * time.Second
	fetchTimeout       = 10 * time.Second
	maxJWKSBytes       = 1 << 20
	minHMACBytes       = 32
	minRSABits         = 2048
	maxTokenBytes      = 16 << 10
)

type claims struct {
	jwt.RegisteredClaims
	Grants        []Grant `json:"eventgate.io/grants"`
	Platform      bool    `json:"eventgate.io/platform"`
	DefaultTenant *Tenant `json:"eventgate.io/defaultTenant"`
}

// verifyKey is one key of a key set.
type verifyKey struct {
	kid string
	alg string // the only algorithm it verifies
	key any    // *rsa.PublicKey, *ecdsa.PublicKey or []byte
}

// jwks is a JSON Web Key Set (RFC 7517); only the members eventgate uses.
type jwks struct {
	Keys []struct {
		Kty string `json:"kty"`
		Kid string `json:"kid"`
		Alg string `json:"alg"`
		Use string `json:"use"`
		Crv string `json:"crv"`
		N   string `json:"n"`
		E   string `json:"e"`
		X   string `json:"x"`
		Y   string `json:"y"`
		K   string `json:"k"`
	} `json:"keys"`
}

// parseJWKS parses a key set. secret allows symmetric ("oct") keys, which
// only a local file may hold. Keys of other types or uses are skipped.
func parseJWKS(data []byte, secret bool) ([]verifyKey, error) {
	var set jwks
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&set); err != nil {
		return nil, fmt.Errorf("key set: %w", err)
	}
	var keys []verifyKey
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		vk := verifyKey{kid: k.Kid}
		switch k.Kty {
		case "RSA":
			n, err1 := b64(k.N)
			e, err2 := b64(k.E)
			if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
				return nil, fmt.Errorf("key set: keys[%d]: bad RSA key", i)
			}
			pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
			if pub.N.BitLen() < minRSABits || pub.E < 3 || pub.E%2 == 0 {
				return nil, fmt.Errorf("key set: keys[%d]: RSA keys must have at least %d bits and an odd exponent", i, minRSABits)
			}
			vk.alg, vk.key = AlgRS256, pub
		case "EC":
			if k.Crv != "P-256" {
				continue // ES256 only
			}
			x, err1 := b64(k.X)
			y, err2 := b64(k.Y)
			if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
				return nil, fmt.Errorf("key set: keys[%d]: bad P-256 key", i)
			}
			pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
			if err != nil {
				return nil, fmt.Errorf("key set: keys[%d]: %w", i, err)
			}
			vk.alg, vk.key = AlgES256, pub
		case "oct":
			if !secret {
				return nil, fmt.Errorf("key set: keys[%d]: symmetric keys are only accepted from a local file", i)
			}
			s, err := b64(k.K)
			if err != nil || len(s) < minHMACBytes {
				return nil, fmt.Errorf("key set: keys[%d]: HMAC keys must have at least %d bytes", i, minHMACBytes)
			}
			vk.alg, vk.key = AlgHS256, s
		default:
			continue
		}
		if k.Alg != "" && k.Alg != vk.alg {
			continue // e.g. an RSA key meant for PS256
		}
		keys = append(keys, vk)
	}
	return keys, nil
}

func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// jwtVerifier verifies bearer JWTs and turns them into principals.
type jwtVerifier struct {
	cfg      JWTConfig
	parser   *jwt.Parser
	static   []verifyKey
	platform map[string]bool
	url      string
	client   *http.Client
	log      *slog.Logger
	now      func() time.Time

	fetchMu   sync.Mutex // one fetch at a time
	mu        sync.Mutex // guards the fields below
	remote    []verifyKey
	fetched   time.Time // last successful fetch
	attempted time.Time // last fetch attempt
}

func newJWTVerifier(ctx context.Context, cfg JWTConfig, log *slog.Logger, now func() time.Time) (*jwtVerifier, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	v := &jwtVerifier{
		cfg: cfg,
		parser: jwt.NewParser(
			jwt.WithValidMethods(cfg.Algorithms),
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(cfg.Leeway),
			jwt.WithTimeFunc(now),
			jwt.WithStrictDecoding(),
		),
		platform: map[string]bool{},
		log:      log,
		now:      now,
	}
	for _, kid := range cfg.PlatformKeyIDs {
		v.platform[kid] = true
	}
	static, err := staticKeys(cfg)
	if err != nil {
		return nil, err
	}
	v.static = static
	if err := uniqueKids(v.static); err != nil {
		return nil, err
	}
	if cfg.KeysURL != "" {
		u, err := url.Parse(cfg.KeysURL)
		if err != nil {
			return nil, fmt.Errorf("jwt keysURL: %w", err)
		}
		if u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname())) {
			return nil, errors.New("jwt keysURL: must be https (http only on loopback)")
		}
		v.url = u.String()
		v.client = keysClient()
		if err := v.refresh(ctx); err != nil {
			return nil, err
		}
	}
	if len(v.static) == 0 && v.url == "" {
		return nil, errors.New("jwt: no keys configured")
	}
	return v, nil
}

// withDefaults checks c and fills its unset settings with defaults.
func (c *JWTConfig) withDefaults() error {
	if c.Issuer == "" || c.Audience == "" {
		return errors.New("jwt: issuer and audience are required")
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = []string{AlgRS256, AlgES256, AlgHS256}
	}
	for _, a := range c.Algorithms {
		if a != AlgRS256 && a != AlgES256 && a != AlgHS256 {
			return fmt.Errorf("jwt: algorithm %q is not supported (RS256, ES256, HS256)", a)
		}
	}
	switch {
	case c.Leeway == 0:
		c.Leeway = defaultLeeway
	case c.Leeway < 0 || c.Leeway > maxLeeway:
		return fmt.Errorf("jwt: leeway must be between 0 and %s", maxLeeway)
	}
	switch {
	case c.RefreshInterval == 0:
		c.RefreshInterval = defaultRefresh
	case c.RefreshInterval < minRefresh || c.RefreshInterval > maxRefresh:
		return fmt.Errorf("jwt: refreshInterval must be between %s and %s", minRefresh, maxRefresh)
	}
	return nil
}

// staticKeys are the keys of cfg's keys file and secret file.
func staticKeys(cfg JWTConfig) ([]verifyKey, error) {
	var static []verifyKey
	if cfg.KeysFile != "" {
		data, err := os.ReadFile(cfg.KeysFile)
		if err != nil {
			return nil, fmt.Errorf("jwt keys file: %w", err)
		}
		keys, err := parseJWKS(data, true)
		if err != nil {
			return nil, fmt.Errorf("jwt keys file %s: %w", cfg.KeysFile, err)
		}
		static = append(static, keys...)
	}
	if cfg.SecretFile != "" {
		data, err := os.ReadFile(cfg.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("jwt secret file: %w", err)
		}
		s := bytes.TrimSpace(data)
		if len(s) < minHMACBytes {
			return nil, fmt.Errorf("jwt secret file %s: the secret must have at least %d bytes", cfg.SecretFile, minHMACBytes)
		}
		static = append(static, verifyKey{kid: cfg.SecretKeyID, alg: AlgHS256, key: s})
	}
	return static, nil
}

// keysClient fetches the keys URL: https only (http only on loopback),
// redirects included.
func keysClient() *http.Client {
	return &http.Client{
		Timeout: fetchTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if req.URL.Scheme != "https" && !(req.URL.Scheme == "http" && loopback(req.URL.Hostname())) {
				return errors.New("redirect away from https refused")
			}
			return nil
		},
	}
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func uniqueKids(keys []verifyKey) error {
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k.kid] {
			return fmt.Errorf("jwt: key id %q is used by two keys", k.kid)
		}
		seen[k.kid] = true
	}
	return nil
}

// refresh fetches the key set from the URL; on failure the keys it had stay.
func (v *jwtVerifier) refresh(ctx context.Context) error {
	return v.refreshSince(ctx, time.Time{})
}

// refreshSince fetches unless another fetch was attempted after since (so
// that callers that found the keys stale at once fetch once).
func (v *jwtVerifier) refreshSince(ctx context.Context, since time.Time) error {
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	v.mu.Lock()
	if v.attempted.After(since) && !since.IsZero() {
		v.mu.Unlock()
		return nil
	}
	v.attempted = v.now()
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.url, nil)
	if err != nil {
		return fmt.Errorf("jwt keysURL: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return fmt.Errorf("jwt keysURL: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("jwt keysURL: %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return fmt.Errorf("jwt keysURL: %w", err)
	}
	if len(data) > maxJWKSBytes {
		return fmt.Errorf("jwt keysURL: key set larger than %d bytes", maxJWKSBytes)
	}
	keys, err := parseJWKS(data, false)
	if err != nil {
		return fmt.Errorf("jwt keysURL: %w", err)
	}
	if err := uniqueKids(append(slices.Clone(v.static), keys...)); err != nil {
		return fmt.Errorf("jwt keysURL: %w", err)
	}
	v.mu.Lock()
	v.remote, v.fetched = keys, v.now()
	v.mu.Unlock()
	return nil
}

// keys returns the current keys, refreshing the remote set when it is stale
// or, at most once per unknownKidInterval, when kid is unknown.
func (v *jwtVerifier) keys(ctx context.Context, kid string, hasKid bool) []verifyKey {
	if v.url == "" {
		return v.static
	}
	v.mu.Lock()
	now := v.now()
	stale := now.Sub(v.fetched) > v.cfg.RefreshInterval && now.Sub(v.attempted) > failedFetchBackoff
	known := !hasKid || slices.ContainsFunc(v.remote, func(k verifyKey) bool { return k.kid == kid }) ||
		slices.ContainsFunc(v.static, func(k verifyKey) bool { return k.kid == kid })
	retry := !known && now.Sub(v.attempted) > unknownKidInterval
	attempted := v.attempted
	v.mu.Unlock()
	if stale || retry {
		if err := v.refreshSince(ctx, attempted); err != nil {
			v.log.Warn("jwt key set refresh failed; keeping the keys we have", "url", v.url, "err", err)
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return append(slices.Clone(v.static), v.remote...)
}

// keyFor selects the key that verifies t: the one with t's key id, or the
// only one for t's algorithm when t has no key id. A key verifies only its
// own algorithm, so a public RSA key is never used as an HMAC secret.
func (v *jwtVerifier) keyFor(ctx context.Context, t *jwt.Token) (verifyKey, error) {
	alg := t.Method.Alg()
	kid, hasKid := t.Header["kid"].(string)
	if _, present := t.Header["kid"]; present && !hasKid {
		return verifyKey{}, errors.New("kid is not a string")
	}
	var found []verifyKey
	for _, k := range v.keys(ctx, kid, hasKid) {
		if (!hasKid || k.kid == kid) && k.alg == alg {
			found = append(found, k)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return verifyKey{}, fmt.Errorf("no %s key with id %q", alg, kid)
	default:
		return verifyKey{}, fmt.Errorf("token names no key id and %d %s keys fit", len(found), alg)
	}
}

// verify checks a JWT and returns its principal.
func (v *jwtVerifier) verify(ctx context.Context, raw string, rec *recorder) (*Principal, error) {
	var c claims
	var used verifyKey
	_, err := v.parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
		k, err := v.keyFor(ctx, t)
		if err != nil {
			return nil, err
		}
		used = k
		return k.key, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrUnauthenticated, jwtReason(err))
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: bearer token has no subject", ErrUnauthenticated)
	}
	p := &Principal{
		Name:          c.Subject,
		Platform:      c.Platform && v.platform[used.kid],
		Grants:        c.Grants,
		DefaultTenant: c.DefaultTenant,
		rec:           rec,
	}
	if c.Platform && !p.Platform {
		v.log.Warn("jwt platform claim ignored: key not trusted for platform", "principal", c.Subject, "kid", used.kid)
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("%w: bearer token grants are invalid: %w", ErrUnauthenticated, err)
	}
	return p, nil
}

// jwtReason says why a token failed, in words safe to send to the caller.
func jwtReason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "bearer token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "bearer token not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "bearer token has the wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "bearer token has the wrong audience"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "bearer token lacks a required claim"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "bearer token signature is not valid"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "bearer token is malformed"
	}
	return "bearer token is not valid"
}
