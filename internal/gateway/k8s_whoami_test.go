package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestK8sAuthWhoami runs the installed kubectl auth whoami: the caller's
// principal, and its default tenant and grants in extra.
func TestK8sAuthWhoami(t *testing.T) {
	tokens := writeTokens(t)
	cert, key := selfSignedCert(t)
	tg := startGateway(t, func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.TLS.CertFile, c.TLS.KeyFile = cert, key
	})
	k := newKubectl(t, strings.Replace(tg.httpURL, "http://", "https://", 1), tokDeployer)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := k.run(t, ctx, "auth", "whoami")
	for _, want := range []string{"Username", "blog-deployer", "system:authenticated", "eventgate.io/default-tenant", "project/blog", "eventgate.io/grants", "project/blog (apps/Deployment)"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl auth whoami lacks %q:\n%s", want, out)
		}
	}
}
