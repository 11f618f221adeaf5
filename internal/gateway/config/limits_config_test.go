package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLimitsSettings: the limits' defaults come from flags or the
// environment, per-tenant overrides from the file; an override key or a
// burst that cannot hold a batch is refused.
func TestLimitsSettings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gw.yaml")
	yaml := "limits:\n  tenants:\n    project/shop: {emitRate: 50000, emitBurst: 100000, maxRowsToRead: 5}\n    user/*: {emitRate: 50, emitBurst: 1000, queryWindow: 1h}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"--config", file, "--tenant-emit-rate=200", "--max-query-window=48h", "--query-window=24h"}, env(map[string]string{"EVENTGATE_TENANT_WATCHES": "7"}))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Limits
	if l.Tenant.EmitRate != 200 || l.Tenant.Watches != 7 || l.Tenant.MaxQueryWindow != 48*time.Hour || l.Tenant.EmitBurst != 100_000 {
		t.Errorf("tenant defaults %+v, want emitRate 200 (flag), watches 7 (environment), maxQueryWindow 48h, emitBurst 20000 (default)", l.Tenant)
	}
	if o := l.Tenants["project/shop"]; o.EmitRate == nil || *o.EmitRate != 50000 || o.MaxRowsToRead == nil || *o.MaxRowsToRead != 5 || o.Watches != nil {
		t.Errorf("project/shop override %+v", o)
	}
	for name, body := range map[string]string{
		"team/shop":            "limits:\n  tenants:\n    team/shop: {emitRate: 1}\n",
		"is less than a batch": "limits:\n  tenant: {emitRate: 10, emitBurst: 5}\n",
	} {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load([]string{"--config", bad}, env(nil)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%q: %v, want an error saying %q", body, err, name)
		}
	}
}
