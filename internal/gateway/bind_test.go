package gateway

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
)

func TestBindAddr(t *testing.T) {
	tests := []struct {
		addr   string
		authed bool
		want   string
		err    error
	}{
		{":9090", false, "127.0.0.1:9090", nil},
		{":9090", true, ":9090", nil},
		{"127.0.0.1:9090", false, "127.0.0.1:9090", nil},
		{"[::1]:9090", false, "[::1]:9090", nil},
		{"localhost:9090", false, "localhost:9090", nil},
		{"0.0.0.0:9090", false, "", ErrUnauthenticatedBind},
		{"[::]:9090", false, "", ErrUnauthenticatedBind},
		{"10.1.2.3:9090", false, "", ErrUnauthenticatedBind},
		{"example.com:9090", false, "", ErrUnauthenticatedBind},
		{"0.0.0.0:9090", true, "0.0.0.0:9090", nil},
	}
	for _, tt := range tests {
		got, err := BindAddr(tt.addr, tt.authed)
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("BindAddr(%q, %v) = %q, %v; want %q, %v", tt.addr, tt.authed, got, err, tt.want, tt.err)
		}
	}
}

// TestServeDebug: pprof profiles are served on loopback only.
func TestServeDebug(t *testing.T) {
	if _, err := serveDebug("0.0.0.0:0", slog.New(slog.DiscardHandler)); !errors.Is(err, ErrUnauthenticatedBind) {
		t.Fatalf("non-loopback debug address: %v, want ErrUnauthenticatedBind", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	stop, err := serveDebug(addr, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("heap profile: %s", resp.Status)
	}
}
