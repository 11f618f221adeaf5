package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(file, []byte("grpcAddr: \":7000\"\nhttpAddr: \":7001\"\nnats:\n  stream: FROMFILE\n  maxAge: 1h\nevents:\n  maxNoteBytes: 2048\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"--config", file, "--http-addr", ":7003"}, env(map[string]string{
		"EVENTGATE_GRPC_ADDR":   ":7002",
		"EVENTGATE_HTTP_ADDR":   ":9999",
		"EVENTGATE_EVENT_TYPES": "Normal,Warning,Error",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.GRPCAddr = ":7002" // env over file
	want.HTTPAddr = ":7003" // flag over env
	want.NATS.Stream = "FROMFILE"
	want.NATS.MaxAge = time.Hour
	want.Events.MaxNoteBytes = 2048
	want.Events.Types = []string{"Normal", "Warning", "Error"}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Fatalf("config mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("grpcAdr: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"unknown flag", []string{"--nope"}, nil},
		{"unknown file key", []string{"--config", bad}, nil},
		{"missing file", []string{"--config", filepath.Join(dir, "absent.yaml")}, nil},
		{"bad env duration", nil, map[string]string{"EVENTGATE_STREAM_MAX_AGE": "soon"}},
		{"note too large", []string{"--max-note-bytes", "70000"}, nil},
		{"bad stream name", []string{"--stream", "a.b"}, nil},
		{"stray argument", []string{"serve"}, nil},
		{"watch replay idle under a second", []string{"--watch-replay-idle", "100ms"}, nil},
		{"ingest nice out of range", []string{"--ingest-nice", "20"}, nil},
		{"negative ingest nice", nil, map[string]string{"EVENTGATE_INGEST_NICE": "-1"}},
		{"cors origin without scheme", []string{"--cors-allowed-origins", "dash.example.com"}, nil},
		{"cors origin with a path", nil, map[string]string{"EVENTGATE_CORS_ALLOWED_ORIGINS": "https://dash.example.com/app"}},
		{"cors origin with two wildcards", []string{"--cors-allowed-origins", "https://*.*.example.com"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Load(tt.args, env(tt.env)); err == nil {
				t.Fatal("Load succeeded, want error")
			}
		})
	}
}

func TestCORSOrigins(t *testing.T) {
	c, err := Load([]string{"--cors-allowed-origins", "https://dash.example.com, http://localhost:3000,https://*.example.org"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://dash.example.com", "http://localhost:3000", "https://*.example.org"}
	if !slices.Equal(c.CORSAllowedOrigins, want) {
		t.Fatalf("origins %q, want %q", c.CORSAllowedOrigins, want)
	}
	if c, err = Load(nil, env(map[string]string{"EVENTGATE_CORS_ALLOWED_ORIGINS": "*"})); err != nil || !slices.Equal(c.CORSAllowedOrigins, []string{"*"}) {
		t.Fatalf("origins %q (%v), want *", c.CORSAllowedOrigins, err)
	}
	if c, err = Load(nil, env(nil)); err != nil || len(c.CORSAllowedOrigins) != 0 {
		t.Fatalf("default origins %q (%v), want none", c.CORSAllowedOrigins, err)
	}
}
