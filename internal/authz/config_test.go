package authz

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func bearerCtx(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
}

// The example tokens file of testdata (and of the README) loads, and the
// test tokens its comment names authenticate as their principals.
func TestExampleTokensFile(t *testing.T) {
	var logs bytes.Buffer
	a, err := New(Config{TokensFile: "testdata/tokens.yaml"}, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Enabled() {
		t.Fatal("not enabled")
	}
	for tok, want := range map[string]string{
		"shop-token-5b0f6c1e9a":     "shop-ci",
		"blog-token-7d2e4a8c31":     "blog-deployer",
		"platform-token-c4f19b27e6": "platform-ops",
	} {
		p, err := a.Authenticate(bearerCtx(tok))
		if err != nil || p.Name != want {
			t.Errorf("token for %s: %v, %v", want, p, err)
		}
	}
	data, _ := os.ReadFile("testdata/tokens.yaml")
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "token-") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			t.Errorf("the tokens file holds a plain token: %s", line)
		}
	}
	blog := a.principals["blog-deployer"]
	if got, _ := blog.DefaultEmitTenant(); got != (Tenant{"project", "blog"}) {
		t.Errorf("blog default tenant %v", got)
	}
	if err := a.principals["shop-ci"].AuthorizeEmit(Tenant{"project", "blog"}, "", "Pod"); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("shop emits into blog: %v", err)
	}
	if !strings.Contains(logs.String(), "principal=shop-ci") {
		t.Errorf("denial not logged with the principal: %s", logs.String())
	}
}

func TestHashToken(t *testing.T) {
	// printf %s shop-token-5b0f6c1e9a | sha256sum
	want := "sha256:473e0a036a9fa5b0632b04d2070ae72386e664d67a19803f77bf1fb505113940"
	if got := HashToken("shop-token-5b0f6c1e9a"); got != want {
		t.Errorf("HashToken = %s", got)
	}
}

func TestTokensFileInvalid(t *testing.T) {
	h := HashToken("t1")
	tests := []struct {
		name, file, want string
	}{
		{"wildcard for non-platform", `
principals:
  - name: p
    grants: [{tenantType: project, tenantName: "*", verbs: [watch]}]`, "only for platform principals"},
		{"global for non-platform", `
principals:
  - name: p
    grants: [{tenantType: global, verbs: [query]}]`, "only for platform principals"},
		{"plain token", `
principals:
  - name: p
    tokens: [my-plain-secret-token]
    grants: [{tenantType: project, tenantName: a, verbs: [watch]}]`, "never the token itself"},
		{"short hash", `
principals:
  - name: p
    tokens: ["sha256:abcd"]`, "64 hex digits"},
		{"duplicate principal", `
principals:
  - {name: p}
  - {name: p}`, "defined twice"},
		{"duplicate token", `
principals:
  - {name: p, tokens: ["` + h + `"]}
  - {name: q, tokens: ["` + h + `"]}`, "listed twice"},
		{"unknown field", `
principals:
  - name: p
    grant: []`, "field grant not found"},
		{"bad verb", `
principals:
  - name: p
    grants: [{tenantType: project, tenantName: a, verbs: [delete]}]`, `unknown verb "delete"`},
		{"no verb", `
principals:
  - name: p
    grants: [{tenantType: project, tenantName: a}]`, "at least one verb"},
		{"bad type", `
principals:
  - name: p
    grants: [{tenantType: team, tenantName: a, verbs: [watch]}]`, "tenantType must be one of"},
		{"no name", `
principals:
  - name: p
    grants: [{tenantType: project, verbs: [watch]}]`, "tenantName is required"},
		{"named global", `
principals:
  - name: p
    platform: true
    grants: [{tenantType: global, tenantName: x, verbs: [watch]}]`, "must be empty for the global tenant"},
		{"kind without kind", `
principals:
  - name: p
    grants: [{tenantType: project, tenantName: a, kinds: [{group: apps}], verbs: [watch]}]`, "kind is required"},
		{"default tenant outside grants", `
principals:
  - name: p
    defaultTenant: {type: project, name: b}
    grants: [{tenantType: project, tenantName: a, verbs: [emit]}]`, "defaultTenant"},
		{"unnamed", `
principals:
  - grants: []`, "name is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{TokensFile: writeFile(t, "tokens.yaml", tt.file)}, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "my-plain-secret-token") {
				t.Errorf("the error echoes the token: %v", err)
			}
		})
	}
}

func TestTokensFilePlatform(t *testing.T) {
	a, err := New(Config{TokensFile: writeFile(t, "tokens.yaml", `
principals:
  - name: ops
    platform: true
    tokens: ["`+HashToken("ops-token")+`"]
    grants:
      - {tenantType: global, tenantName: _, verbs: [watch]}
      - {tenantType: project, tenantName: "*", kinds: [{group: core, kind: Pod}], verbs: [query]}
`)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(bearerCtx("ops-token"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Grant{
		{TenantType: "global", Verbs: []Verb{VerbWatch}},
		{TenantType: "project", TenantName: "*", Kinds: []GroupKind{{"", "Pod"}}, Verbs: []Verb{VerbQuery}},
	}
	if diff := cmp.Diff(want, p.Grants); diff != "" || !p.Platform {
		t.Errorf("grants (-want +got):\n%s", diff)
	}
}

func TestConfigEnabled(t *testing.T) {
	a, err := New(Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Enabled() {
		t.Fatal("enabled with nothing configured")
	}
	p, err := a.Authenticate(context.Background())
	if err != nil || !p.Admin || p.Name != AdminName {
		t.Fatalf("unconfigured: %v, %v", p, err)
	}
	// Even a bogus credential is the administrator: there is nothing to check it with.
	if p, err := a.Authenticate(bearerCtx("whatever")); err != nil || !p.Admin {
		t.Fatalf("unconfigured with a token: %v, %v", p, err)
	}
	for _, cfg := range []Config{
		{MTLS: MTLSConfig{CAFile: "x"}},
		{JWT: JWTConfig{KeysURL: "https://idp.example/jwks"}},
	} {
		if !cfg.Enabled() {
			t.Errorf("%+v not enabled", cfg)
		}
	}
	if _, err := New(Config{TokensFile: "testdata/missing.yaml"}, nil, nil); err == nil {
		t.Error("missing tokens file accepted")
	}
}

func TestExemptInvalid(t *testing.T) {
	for _, e := range []string{"", "/", "grpc.health.v1.Health/"} {
		if _, err := New(Config{Exempt: []string{e}}, nil, nil); err == nil {
			t.Errorf("exempt %q accepted", e)
		}
	}
}
