package authz

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"time"
)

// mtlsVerifier maps verified client certificates to principals.
type mtlsVerifier struct {
	pool       *x509.CertPool
	identities []Identity
	principals map[string]*Principal
}

func newMTLSVerifier(cfg MTLSConfig, principals map[string]*Principal) (*mtlsVerifier, error) {
	pem, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("mtls caFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("mtls caFile %s: no PEM certificates", cfg.CAFile)
	}
	if len(cfg.Identities) == 0 {
		return nil, errors.New("mtls: identities are required (which certificate is which principal)")
	}
	for i, id := range cfg.Identities {
		n := 0
		for _, s := range []string{id.CN, id.DNS, id.URI, id.Email} {
			if s != "" {
				n++
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("mtls identities[%d]: exactly one of cn, dns, uri, email is required", i)
		}
		if _, ok := principals[id.Principal]; !ok {
			return nil, fmt.Errorf("mtls identities[%d]: principal %q is not defined in the tokens file", i, id.Principal)
		}
	}
	return &mtlsVerifier{pool: pool, identities: cfg.Identities, principals: principals}, nil
}

// principal verifies the peer's certificate chain against the CA (whatever
// the TLS server was configured to check) and maps it to a principal.
func (m *mtlsVerifier) principal(state tls.ConnectionState, now time.Time) (*Principal, error) {
	if len(state.PeerCertificates) == 0 {
		return nil, fmt.Errorf("%w: no credentials (bearer token or client certificate)", ErrUnauthenticated)
	}
	leaf := state.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range state.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         m.pool,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("%w: client certificate not trusted", ErrUnauthenticated)
	}
	var names []string
	for _, id := range m.identities {
		if id.matches(leaf) && !slices.Contains(names, id.Principal) {
			names = append(names, id.Principal)
		}
	}
	switch len(names) {
	case 0:
		return nil, fmt.Errorf("%w: client certificate maps to no principal", ErrUnauthenticated)
	case 1:
		return m.principals[names[0]], nil
	default:
		return nil, fmt.Errorf("%w: client certificate maps to several principals", ErrUnauthenticated)
	}
}

func (id Identity) matches(c *x509.Certificate) bool {
	switch {
	case id.CN != "":
		return c.Subject.CommonName == id.CN
	case id.DNS != "":
		return slices.Contains(c.DNSNames, id.DNS)
	case id.Email != "":
		return slices.Contains(c.EmailAddresses, id.Email)
	case id.URI != "":
		return slices.ContainsFunc(c.URIs, func(u *url.URL) bool { return u.String() == id.URI })
	}
	return false
}
