package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/intake"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/watch"
)

// env is the package's real parts, started once: an embedded JetStream
// server with the events stream, and an intake on it.
var env struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	intake *intake.Intake
	hub    *watch.Hub
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "service-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ns, err := ejs.Embedded(dir, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ns.Shutdown()
	cfg := ejs.DefaultConfig()
	nc, err := ejs.Connect(cfg, ns, "service-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	if env.js, err = ejs.NewJetStream(nc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if env.stream, err = ejs.EnsureStream(ctx, env.js, cfg, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	icfg := intake.DefaultConfig()
	icfg.Partitions = 4
	icfg.EventsStream = cfg.Stream
	if env.intake, err = intake.Start(ctx, nc, env.js, icfg, slog.New(slog.DiscardHandler), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = env.intake.Stop(sctx)
	}()
	if env.hub, err = watch.Start(ctx, env.js, cfg.Stream, slog.New(slog.DiscardHandler), watch.NewMetrics(nil)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.hub.Stop()
	return m.Run()
}

// newEvents is the EventService over the real publisher, and the real
// intake when series is set, and the real watch hub. (The store is not
// needed: these tests neither list nor query.)
func newEvents(series bool) *Events {
	cfg := EventsConfig{Normalizer: event.Normalizer{Limits: event.DefaultLimits()}, MaxBatch: 100}
	if series {
		cfg.Intake = env.intake
	}
	return NewEvents(cfg, ejs.NewPublisher(env.js), env.hub, nil, nil,
		slog.New(slog.DiscardHandler), noop.NewTracerProvider(), nil)
}

// stored reads the event the events stream holds at seq.
func stored(t *testing.T, seq uint64) *nats.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := env.stream.GetMsg(ctx, seq)
	if err != nil {
		t.Fatalf("read stored event %d: %v", seq, err)
	}
	return &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header}
}
