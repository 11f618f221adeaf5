// Package gatewaytest is a test fixture: a real gateway served in process
// on loopback, for the tests of the packages that talk to one (the SDK,
// the CLI). Its ClickHouse lives in the directory the test binary shares
// (chtest.MainDir), in a database of its own.
package gatewaytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/gateway"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// Gateway is a gateway Start serves.
type Gateway struct {
	GRPCAddr, HTTPAddr string
	// Stop ends it and waits for Serve to return; t.Cleanup calls it too.
	Stop func()
}

// Start serves a gateway on dataDir at grpcAddr and httpAddr ("127.0.0.1:0"
// for any port; a fixed one lets a client survive a restart). Its
// ClickHouse database, in chDir, is named db + a hash of dataDir, so that a
// restart on the same directory finds its data. mutate changes the
// configuration before it is validated.
func Start(t testing.TB, chDir, db, dataDir, grpcAddr, httpAddr string, mutate ...func(*config.Config)) *Gateway {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.ClickHouse.DataDir = chDir
	h := sha256.Sum256([]byte(dataDir))
	cfg.ClickHouse.Database = db + hex.EncodeToString(h[:6])
	cfg.ClickHouse.BatchWait = 20 * time.Millisecond
	for _, m := range mutate {
		if m != nil {
			m(&cfg)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, err := gateway.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	gl, hl := Listen(t, grpcAddr), Listen(t, httpAddr)
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, gl, hl) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &Gateway{GRPCAddr: gl.Addr().String(), HTTPAddr: hl.Addr().String(), Stop: stop}
}

// Listen listens on addr, retrying for up to 10 s: a gateway closing on a
// fixed address releases it.
func Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
