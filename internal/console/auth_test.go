package console_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

const (
	tokShop     = "console-shop-token-0123456789"
	tokPlatform = "console-platform-token-012345"
)

// startAuthGateway is a gateway with bearer tokens: one for project/shop,
// one for the platform (every tenant).
func startAuthGateway(t *testing.T) *testGateway {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	yaml := fmt.Sprintf(`principals:
  - name: shop
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: shop, verbs: [emit, watch, query, analytics]}
  - name: platform
    platform: true
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: "*", verbs: [emit, watch, query, analytics]}
`, authz.HashToken(tokShop), authz.HashToken(tokPlatform))
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return startGateway(t, func(c *config.Config) { c.Auth.TokensFile = file })
}

func tenantEvent(tenant, reason string) string {
	return fmt.Sprintf(`{"tenant":{"type":"project","name":%q},"reason":%q,"type":"Normal","note":"in %s","reportingController":"example.com/console-test","regarding":{"kind":"Deployment","namespace":"web","name":"front"}}`, tenant, reason, tenant)
}

// TestTokenWithoutGrantSeesOnlyItsTenant enters the shop's token in the
// console: its tenant picker offers only project/shop, search and the live
// tail show only the shop's events, and asking for another tenant shows
// the API's 403.
func TestTokenWithoutGrantSeesOnlyItsTenant(t *testing.T) {
	gw := startAuthGateway(t)
	mustEmit(t, gw.url, tokPlatform, `{"events":[`+tenantEvent("shop", "ShopDeployed")+`,`+tenantEvent("blog", "BlogDeployed")+`]}`)
	waitQueryable(t, gw.url, tokPlatform, "/v1/events?reason=ShopDeployed&reason=BlogDeployed", "events", 2)

	ctx := tab(t)
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search?reason=ShopDeployed,BlogDeployed"))
	// Without a token the API refuses, and the page says so as the API does.
	waitText(t, ctx, "#error", "401 Unauthorized", 10*time.Second)

	do(t, ctx, chromedp.SendKeys(chromedp.CSS("#token"), tokShop), chromedp.Click(chromedp.CSS("#auth-form button[type=submit]")))
	waitJS(t, ctx, "the tenant picker to offer the token's tenant", `[...document.querySelectorAll('#tenant option')].some((o) => o.value === 'project/shop')`, 10*time.Second)
	if got := eval[[]string](t, ctx, `[...document.querySelectorAll('#tenant option')].map((o) => o.value)`); strings.Join(got, ",") != ",project/shop" {
		t.Errorf("the tenant picker offers %q, want only all-mine and project/shop", got)
	}
	if stored := eval[string](t, ctx, `sessionStorage.getItem('eventgate.token')`); stored != tokShop {
		t.Errorf("the token is not kept in sessionStorage (%q)", stored)
	}
	if cookies := eval[string](t, ctx, `document.cookie`); cookies != "" {
		t.Errorf("the console set cookies %q", cookies)
	}
	waitText(t, ctx, "#results-count", "1 events", 10*time.Second)
	if got := tableColumn(t, ctx, "#results-table", 3); strings.Join(got, ",") != "ShopDeployed" {
		t.Errorf("the shop's token searches and sees %q, want only ShopDeployed", got)
	}

	// Another tenant, by URL: the API's refusal, as it states it.
	do(t, ctx, chromedp.Navigate(gw.url+"/ui/#/search?tenant=project%2Fblog&reason=BlogDeployed"))
	waitText(t, ctx, "#error", "403 Forbidden", 10*time.Second)

	// The live tail of the shop's token: a blog event stored before a shop
	// event never shows.
	do(t, ctx, chromedp.SetValue(chromedp.CSS("#tenant"), ""), chromedp.Navigate(gw.url+"/ui/#/tail?reason=ShopLive,BlogLive"))
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`sessionStorage.removeItem('eventgate.tenant')`), chromedp.Reload())
	waitText(t, ctx, "#tail-status", "Live", 15*time.Second)
	mustEmit(t, gw.url, tokPlatform, `{"events":[`+tenantEvent("blog", "BlogLive")+`]}`)
	waitQueryable(t, gw.url, tokPlatform, "/v1/events?reason=BlogLive", "events", 1)
	mustEmit(t, gw.url, tokPlatform, `{"events":[`+tenantEvent("shop", "ShopLive")+`]}`)
	waitText(t, ctx, "#tail-list", "ShopLive", 10*time.Second)
	if list := innerText(t, ctx, "#tail-list"); strings.Contains(list, "BlogLive") {
		t.Errorf("the shop's live tail shows the blog's event:\n%s", list)
	}
}
