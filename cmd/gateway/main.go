// Command gateway runs eventgate: gRPC and REST in front of NATS JetStream.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/eventgate/eventgate/internal/gateway"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		config.Usage(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", oneLine(withFix(err)))
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	cfg, err := config.Load(args, os.LookupEnv)
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	return gateway.Run(ctx, cfg, log)
}

// withFix appends the fix for the start-up failures whose cause is known
// but whose message does not say what to do about it. (The engine
// library's own error already names its fix.)
func withFix(err error) error {
	var fix string
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		fix = "another process listens on that address: stop it, or choose another with --grpc-addr, --http-addr or --nats-listen"
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, syscall.ECONNREFUSED):
		fix = "NATS is unreachable: start it or correct --nats-url; leave --nats-url empty to run NATS embedded"
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS), errors.Is(err, syscall.ENOTDIR):
		fix = "the data directory is not writable: choose another with --data-dir, or fix its permissions"
	case strings.Contains(err.Error(), "chdb: load "):
		// The library's loader has no sentinel for a file that is there but
		// does not load (truncated download, wrong architecture).
		fix = "the embedded ClickHouse engine library libchdb.so did not load: fetch it again with `make chdb` (scripts/fetch-chdb.sh), point --chdb-lib / EVENTGATE_CHDB_LIB at a working libchdb.so, or set --clickhouse-dsn to use a ClickHouse server"
	default:
		return err
	}
	return fmt.Errorf("%w (%s)", err, fix)
}

// oneLine keeps a start-up error on one line: some causes (a wrapped
// engine message) carry newlines.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
