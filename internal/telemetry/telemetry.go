// Package telemetry sets up logging and OpenTelemetry tracing.
package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// NewLogger returns a structured logger writing to w.
func NewLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		lv = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lv}
	if strings.EqualFold(format, "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Propagator carries trace context in gRPC metadata, HTTP headers and
// JetStream message headers.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// NewTracerProvider returns the gateway's tracer provider and its shutdown.
// With an exporter (endpoint set, or the standard OTEL_EXPORTER_OTLP_*
// variables naming one), spans are sampled as their parent was (and every
// root) and exported over OTLP/gRPC. Without one, no span is recorded: the
// provider is a no-op that still carries a caller's trace context (its
// traceparent) through the intake and the events stream to the watchers,
// and adds none to a call that came without one, so an untraced event costs
// no span and no header on its way.
func NewTracerProvider(ctx context.Context, endpoint, version string) (trace.TracerProvider, func(context.Context) error, error) {
	if endpoint == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "eventgate"),
		attribute.String("service.version", version),
	))
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	var eopts []otlptracegrpc.Option
	if endpoint != "" {
		eopts = append(eopts, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, eopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
		sdktrace.WithBatcher(exp),
	)
	return tp, tp.Shutdown, nil
}
