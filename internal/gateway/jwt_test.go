package gateway

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestJWTOnEveryPath: a JWT's grants bind gRPC and REST alike; expired,
// wrongly signed, wrong-issuer, wrong-audience and alg=none tokens are
// refused as unauthenticated.
func TestJWTOnEveryPath(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef-test-secret")
	file := filepath.Join(t.TempDir(), "hs256.key")
	if err := os.WriteFile(file, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	tg := startGateway(t, func(c *config.Config) {
		c.Auth.JWT.SecretFile, c.Auth.JWT.SecretKeyID = file, "k1"
		c.Auth.JWT.Issuer, c.Auth.JWT.Audience = "https://issuer.test", "eventgate"
	})
	sign := func(mut func(jwt.MapClaims), key []byte, method jwt.SigningMethod) string {
		claims := jwt.MapClaims{
			"iss": "https://issuer.test", "aud": "eventgate", "sub": "ci-bot",
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(),
			"eventgate.io/grants": []map[string]any{{"tenantType": "project", "tenantName": "shop", "verbs": []string{"emit", "query"}}},
		}
		if mut != nil {
			mut(claims)
		}
		tok := jwt.NewWithClaims(method, claims)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	valid := sign(nil, secret, jwt.SigningMethodHS256)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": "https://issuer.test", "aud": "eventgate", "sub": "x", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	bad := map[string]string{
		"expired":        sign(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }, secret, jwt.SigningMethodHS256),
		"wrong key":      sign(nil, []byte("another-secret-another-secret-0123456"), jwt.SigningMethodHS256),
		"wrong issuer":   sign(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }, secret, jwt.SigningMethodHS256),
		"wrong audience": sign(func(c jwt.MapClaims) { c["aud"] = "other" }, secret, jwt.SigningMethodHS256),
		"alg none":       none,
		"global grant": sign(func(c jwt.MapClaims) {
			c["eventgate.io/grants"] = []map[string]any{{"tenantType": "global", "verbs": []string{"query"}}}
		}, secret, jwt.SigningMethodHS256),
	}
	ctx := context.Background()
	shop := &eventgatev1.Tenant{Type: "project", Name: "shop"}
	if _, err := tg.client.Emit(withToken(ctx, valid), &eventgatev1.EmitRequest{Tenant: shop, Events: []*eventgatev1.Event{testEvent("J", "Pod", "ns", "p")}}); err != nil {
		t.Fatalf("valid JWT: %v", err)
	}
	if _, err := tg.client.Emit(withToken(ctx, valid), &eventgatev1.EmitRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "blog"}, Events: []*eventgatev1.Event{testEvent("J", "Pod", "ns", "p")}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("JWT emitting outside its grants: %v", err)
	}
	w, err := tg.client.StreamWatch(withToken(ctx, valid), &eventgatev1.StreamWatchRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("JWT without the watch verb: %v", err)
	}
	for name, tok := range bad {
		if _, err := tg.client.Query(withToken(ctx, tok), &eventgatev1.QueryRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s JWT over gRPC: %v, want Unauthenticated", name, err)
		}
		if code := restStatus(t, http.MethodGet, tg.httpURL+"/v1/events", tok, ""); code != http.StatusUnauthorized {
			t.Errorf("%s JWT over REST: %d, want 401", name, code)
		}
	}
	if code := restStatus(t, http.MethodGet, tg.httpURL+"/v1/events?tenant.type=project&tenant.name=shop", valid, ""); code != http.StatusOK {
		t.Fatalf("valid JWT over REST: %d", code)
	}
}
