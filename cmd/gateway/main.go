// Command gateway runs eventgate: gRPC and REST in front of NATS JetStream.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/eventgate/eventgate/internal/config"
	"github.com/eventgate/eventgate/internal/gateway"
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
		fmt.Fprintln(os.Stderr, "gateway:", err)
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
