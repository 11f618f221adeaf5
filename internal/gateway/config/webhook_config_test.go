package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFluxAndCorrelateSettings: flux.tenantMetadata comes from the file,
// --k8s-core-correlate from a flag or the environment; a bad tenant key is
// refused.
func TestFluxAndCorrelateSettings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gw.yaml")
	yaml := "flux:\n  tenantMetadata:\n    project/shop: {cluster: prod, region: eu}\n    project/*: {env: tenant}\n    global: {cluster: mgmt}\nk8sCoreCorrelate: false\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"--config", file}, env(map[string]string{"EVENTGATE_K8S_CORE_CORRELATE": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"project/shop": {"cluster": "prod", "region": "eu"},
		"project/*":    {"env": "tenant"},
		"global":       {"cluster": "mgmt"},
	}
	if d := cmp.Diff(want, cfg.Flux.TenantMetadata); d != "" {
		t.Fatalf("tenantMetadata (-want +got):\n%s", d)
	}
	if !cfg.K8sCoreCorrelate {
		t.Fatal("EVENTGATE_K8S_CORE_CORRELATE=true did not turn the correlator on")
	}
	if Default().K8sCoreCorrelate {
		t.Fatal("the correlator is on by default")
	}
	cfg, err = Load([]string{"--config", file, "--k8s-core-correlate=false"}, env(map[string]string{"EVENTGATE_K8S_CORE_CORRELATE": "true"}))
	if err != nil || cfg.K8sCoreCorrelate {
		t.Fatalf("flag did not win over the environment: %v, %v", cfg.K8sCoreCorrelate, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("flux:\n  tenantMetadata:\n    team/shop: {a: b}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load([]string{"--config", bad}, env(nil)); err == nil || !strings.Contains(err.Error(), "team/shop") {
		t.Fatalf("bad tenant key: %v, want an error naming it", err)
	}
}
