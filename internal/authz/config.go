package authz

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config configures authentication. The gateway embeds it as `auth:`. With
// nothing configured, authentication is off and every caller is the local
// administrator.
type Config struct {
	// TokensFile is a YAML file of principals, their grants and the SHA-256
	// hashes of their bearer tokens (see HashToken). mTLS identities map to
	// principals defined here.
	TokensFile string `yaml:"tokensFile"`
	// JWT verifies bearer JWTs.
	JWT JWTConfig `yaml:"jwt"`
	// MTLS maps verified client certificates to principals.
	MTLS MTLSConfig `yaml:"mtls"`
	// Exempt lists full gRPC method prefixes served without authentication
	// when it is on. Nil means DefaultExempt; an empty list exempts nothing.
	Exempt []string `yaml:"exempt"`
}

// DefaultExempt is the gRPC health service: probes carry no credentials.
// Reflection is not exempt: it describes the API to whoever asks.
var DefaultExempt = []string{"/grpc.health.v1.Health/"}

// Enabled reports whether any authenticator is configured.
func (c Config) Enabled() bool {
	return c.TokensFile != "" || c.JWT.Enabled() || c.MTLS.Enabled()
}

// JWTConfig configures bearer JWTs. Keys come from a JWKS file (RSA, EC
// P-256 and "oct" HMAC keys), a JWKS URL (public keys only) and/or a raw
// HMAC secret file. Issuer and Audience are required.
type JWTConfig struct {
	KeysFile string `yaml:"keysFile"`
	// KeysURL is fetched over https (http only on loopback) when the
	// authenticator is built, again every RefreshInterval, and on a token
	// with an unknown key id at most once a minute.
	KeysURL string `yaml:"keysURL"`
	// SecretFile holds an HS256 secret (at least 32 bytes; surrounding
	// whitespace is trimmed), known by SecretKeyID.
	SecretFile  string `yaml:"secretFile"`
	SecretKeyID string `yaml:"secretKeyID"`
	Issuer      string `yaml:"issuer"`
	Audience    string `yaml:"audience"`
	// Algorithms accepted; default RS256, ES256, HS256. Each key only
	// verifies its own algorithm.
	Algorithms []string `yaml:"algorithms"`
	// Leeway for exp, nbf and iat; default 30s, at most 5m.
	Leeway time.Duration `yaml:"leeway"`
	// RefreshInterval of KeysURL; default 10m, between 1m and 24h.
	RefreshInterval time.Duration `yaml:"refreshInterval"`
	// PlatformKeyIDs are the key ids whose tokens may carry the
	// "eventgate.io/platform" claim; any other key's platform claim is
	// ignored (its wildcard or global grants then invalidate the token).
	PlatformKeyIDs []string `yaml:"platformKeyIDs"`
}

// Enabled reports whether JWTs are configured.
func (c JWTConfig) Enabled() bool {
	return c.KeysFile != "" || c.KeysURL != "" || c.SecretFile != ""
}

// MTLSConfig maps client certificates to principals of the tokens file.
type MTLSConfig struct {
	// CAFile holds the PEM certificates client certificates must chain to.
	CAFile     string     `yaml:"caFile"`
	Identities []Identity `yaml:"identities"`
}

// Enabled reports whether client certificates are configured.
func (c MTLSConfig) Enabled() bool { return c.CAFile != "" }

// Identity maps a certificate to a principal: exactly one of CN (subject
// common name), DNS, URI or Email (subject alternative names) is set. SANs
// are preferable to CN, which name constraints do not cover.
type Identity struct {
	CN        string `yaml:"cn"`
	DNS       string `yaml:"dns"`
	URI       string `yaml:"uri"`
	Email     string `yaml:"email"`
	Principal string `yaml:"principal"`
}

// TokenHashPrefix starts every token hash in a tokens file.
const TokenHashPrefix = "sha256:"

// HashToken returns the form a bearer token is stored in a tokens file:
// "sha256:" and the hex SHA-256 of the token. Tokens are random secrets, not
// passwords, so a fast hash suffices: the file does not reveal them.
//
//	printf %s "$TOKEN" | sha256sum   # the same hex
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return TokenHashPrefix + hex.EncodeToString(h[:])
}

// tokensFile is the tokens file:
//
//	principals:
//	  - name: shop-ci
//	    tokens: ["sha256:…"]
//	    grants:
//	      - {tenantType: project, tenantName: shop, verbs: [emit, watch, query]}
type tokensFile struct {
	Principals []filePrincipal `yaml:"principals"`
}

type filePrincipal struct {
	Name          string   `yaml:"name"`
	Platform      bool     `yaml:"platform"`
	Tokens        []string `yaml:"tokens"`
	Grants        []Grant  `yaml:"grants"`
	DefaultTenant *Tenant  `yaml:"defaultTenant"`
}

// loadTokens reads a tokens file: the principals by name and by token hash.
func loadTokens(path string) (map[string]*Principal, map[[sha256.Size]byte]*Principal, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("tokens file: %w", err)
	}
	byName, byHash, err := parseTokens(data)
	if err != nil {
		return nil, nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return byName, byHash, nil
}

func parseTokens(data []byte) (map[string]*Principal, map[[sha256.Size]byte]*Principal, error) {
	var f tokensFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		// yaml errors quote lines, never token values (only hashes are stored).
		return nil, nil, err
	}
	byName := map[string]*Principal{}
	byHash := map[[sha256.Size]byte]*Principal{}
	for i, fp := range f.Principals {
		p := &Principal{Name: fp.Name, Platform: fp.Platform, Grants: fp.Grants, DefaultTenant: fp.DefaultTenant}
		if p.Name == "" {
			return nil, nil, fmt.Errorf("principals[%d]: name is required", i)
		}
		if _, dup := byName[p.Name]; dup {
			return nil, nil, fmt.Errorf("principals[%d]: principal %q is defined twice", i, p.Name)
		}
		if err := p.validate(); err != nil {
			return nil, nil, err
		}
		for j, t := range fp.Tokens {
			h, err := parseTokenHash(t)
			if err != nil {
				// Never echo the value: it may be a plain token pasted by mistake.
				return nil, nil, fmt.Errorf("principal %q: tokens[%d]: %w", p.Name, j, err)
			}
			if _, dup := byHash[h]; dup {
				return nil, nil, fmt.Errorf("principal %q: tokens[%d]: the same token is listed twice", p.Name, j)
			}
			byHash[h] = p
		}
		byName[p.Name] = p
	}
	return byName, byHash, nil
}

func parseTokenHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	hx, ok := strings.CutPrefix(s, TokenHashPrefix)
	if !ok || len(hx) != 2*sha256.Size {
		return h, fmt.Errorf("must be %q and 64 hex digits (the SHA-256 of the token, see HashToken), never the token itself", TokenHashPrefix)
	}
	if _, err := hex.Decode(h[:], []byte(strings.ToLower(hx))); err != nil {
		return h, fmt.Errorf("must be %q and 64 hex digits", TokenHashPrefix)
	}
	return h, nil
}
