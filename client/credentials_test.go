package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eventgate/eventgate/client"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/config"
)

// TestTLSAndTokenSourcePerCall: over TLS (the server's certificate
// trusted through WithCAFile), the token source is asked on every call,
// so a rotated token is used from the next call on.
func TestTLSAndTokenSourcePerCall(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSignedCert(t, dir)
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf(`principals:
  - name: shop
    tokens: [%q, %q]
    grants:
      - {tenantType: project, tenantName: shop, verbs: [emit, watch, query, analytics]}
`, authz.HashToken("token-one-0123456789"), authz.HashToken("token-two-0123456789"))), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.TLS.CertFile, c.TLS.KeyFile = cert, key
	})
	var calls atomic.Int32
	var current atomic.Value
	current.Store("token-one-0123456789")
	c, err := client.New(g.grpcAddr, client.WithCAFile(cert), client.WithTokenSource(func(context.Context) (string, error) {
		calls.Add(1)
		return current.Load().(string), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev := &client.Event{Reason: "Secure", Type: client.TypeNormal, Action: "Test", ReportingController: "example.com/tls", Regarding: pod("web", "a")}
	if _, err := c.Emit(ctx, &client.EmitRequest{Events: []*client.Event{ev}, Tenant: &client.Tenant{Type: "project", Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	current.Store("token-two-0123456789")
	for _, err := range c.Query(ctx, &client.QueryRequest{Tenant: &client.Tenant{Type: "project", Name: "shop"}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the token source was asked %d times for 2 calls", n)
	}
	current.Store("not-a-token-0123456789")
	if _, err := c.Get(ctx, &client.GetRequest{Uid: "x"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("with a wrong token: %v, want Unauthenticated", err)
	}
	// Without trusting the server's certificate, nothing is sent.
	untrusted := newClientTLS(t, g.grpcAddr)
	if _, err := untrusted.Get(ctx, &client.GetRequest{Uid: "x"}); status.Code(err) != codes.Unavailable {
		t.Errorf("an untrusted server: %v, want Unavailable", err)
	}
}

func newClientTLS(t *testing.T, addr string) *client.Client {
	c, err := client.New(addr, client.WithTLS(nil), client.WithToken("token-one-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key.
func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "eventgate-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
