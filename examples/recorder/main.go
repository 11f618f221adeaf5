// Command recorder is an example service built on the eventgate SDK: a
// worker that processes orders and records an event for each, as a
// Kubernetes controller records events about its objects.
//
//	go run ./examples/recorder -server localhost:9090 -insecure -orders 1000
//
// Stop the gateway while it runs: the worker is not slowed down (Eventf
// never blocks), the recorder retries, and the summary says how many
// events were stored and how many were dropped, and why.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/eventgate/eventgate/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "recorder:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	server := flag.String("server", "localhost:9090", "gateway gRPC address")
	insecure := flag.Bool("insecure", false, "connect without TLS")
	token := flag.String("token", os.Getenv("EVENTGATE_TOKEN"), "bearer token")
	orders := flag.Int("orders", 1000, "orders to process")
	rate := flag.Duration("every", time.Millisecond, "time between orders")
	flag.Parse()

	opts := []client.Option{client.WithToken(*token)}
	if *insecure {
		opts = append(opts, client.WithInsecure())
	}
	c, err := client.New(*server, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	rec := c.NewRecorder(client.RecorderOptions{
		ReportingController: "example.com/order-worker",
		ReportingInstance:   hostname(),
		Metrics: client.Metrics{OnRetry: func(err error, backoff time.Duration) {
			log.Printf("gateway unavailable (%v): retrying in %s", err, backoff.Round(time.Millisecond))
		}},
	})
	tick := time.NewTicker(*rate)
	defer tick.Stop()
	for i := 0; i < *orders; i++ {
		select {
		case <-ctx.Done():
			i = *orders
			continue
		case <-tick.C:
		}
		order := &client.ObjectReference{ApiVersion: "shop.example.com/v1", Kind: "Order", Namespace: "shop", Name: fmt.Sprintf("order-%d", i)}
		if i%10 == 9 {
			rec.Eventf(order, nil, client.TypeWarning, "PaymentDeclined", "Charge", "card declined for order %d", i)
		} else {
			rec.Eventf(order, nil, client.TypeNormal, "Charged", "Charge", "charged order %d", i)
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = rec.Close(closeCtx)
	s := rec.Stats()
	fmt.Printf("recorded %d events: %d stored, dropped %v, %d reconnections\n", s.Queued, s.Stored, s.Dropped, s.Retries)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the gateway did not acknowledge everything within 10s: %w", err)
	}
	return err
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
