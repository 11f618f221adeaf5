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
	"github.com/eventgate/eventgate/internal/gateway/config"
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
	c, err := client.New(g.GRPCAddr, client.WithCAFile(cert), client.WithTokenSource(func(context.Context) (string, error) {
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
	untrusted := newClientTLS(t, g.GRPCAddr)
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
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
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

// TestMutualTLS: the client certificate is the credential; the gateway
// maps it to its principal.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	caCert, caKeyFile := selfSignedCert(t, dir)
	clientCert, clientKey := clientCertificate(t, dir, caCert, caKeyFile, "shop-client")
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(`principals:
  - name: shop
    grants:
      - {tenantType: project, tenantName: shop, verbs: [emit, query]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.Auth.MTLS = authz.MTLSConfig{CAFile: caCert, Identities: []authz.Identity{{CN: "shop-client", Principal: "shop"}}}
		c.TLS.CertFile, c.TLS.KeyFile = caCert, caKeyFile
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(g.GRPCAddr, client.WithCAFile(caCert), client.WithClientCertificate(clientCert, clientKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	shop := &client.Tenant{Type: "project", Name: "shop"}
	ev := &client.Event{Reason: "Mutual", Type: client.TypeNormal, Action: "Test", ReportingController: "example.com/mtls", Regarding: pod("web", "a")}
	if _, err := c.Emit(ctx, &client.EmitRequest{Events: []*client.Event{ev}, Tenant: shop}); err != nil {
		t.Fatalf("emit with a client certificate: %v", err)
	}
	blog := &client.Tenant{Type: "project", Name: "blog"}
	if _, err := c.Emit(ctx, &client.EmitRequest{Events: []*client.Event{ev}, Tenant: blog}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("emit to another tenant: %v, want PermissionDenied", err)
	}
	anon, err := client.New(g.GRPCAddr, client.WithCAFile(caCert))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Emit(ctx, &client.EmitRequest{Events: []*client.Event{ev}, Tenant: shop}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("emit without a certificate: %v, want Unauthenticated", err)
	}
}

// clientCertificate writes a client certificate for cn signed by the CA.
func clientCertificate(t *testing.T, dir, caCertFile, caKeyFile, cn string) (certFile, keyFile string) {
	t.Helper()
	caPEM, err := os.ReadFile(caCertFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(caKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	kblock, _ := pem.Decode(keyPEM)
	caKey, err := x509.ParseECPrivateKey(kblock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
