package jetstream

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
)

// A server whose store holds less than its streams' size limits add up to
// (its disk filled up, or shrank, since the streams were created; the
// embedded server's store is 75% of the disk space free when it starts)
// refuses to create or change any stream (JetStream error 10047), even a
// change that lowers a limit, and key-value buckets are streams. The
// streams it has go on taking messages until the store is full. So an
// existing stream or bucket is then used as it is, with a warning, rather
// than stopping the gateway; a new one still fails.

// storeFullFix is what the warning tells an operator to do.
const storeFullFix = "free disk space where the NATS server stores streams, or, with the embedded server, raise --nats-max-store"

// CreateOrUpdateStream creates the stream sc names or updates it to sc; when
// the server refuses that for want of storage and the stream exists, it
// returns the stream as it is, and log (slog.Default() if nil) warns.
func CreateOrUpdateStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, log *slog.Logger) (jetstream.Stream, error) {
	return keepOnFullStore(log, "stream", sc.Name,
		func() (jetstream.Stream, error) { return js.CreateOrUpdateStream(ctx, sc) },
		func() (jetstream.Stream, error) { return js.Stream(ctx, sc.Name) })
}

// CreateOrUpdateKeyValue is CreateOrUpdateStream for the bucket kc names.
func CreateOrUpdateKeyValue(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig, log *slog.Logger) (jetstream.KeyValue, error) {
	return keepOnFullStore(log, "bucket", kc.Bucket,
		func() (jetstream.KeyValue, error) { return js.CreateOrUpdateKeyValue(ctx, kc) },
		func() (jetstream.KeyValue, error) { return js.KeyValue(ctx, kc.Bucket) })
}

// keepOnFullStore returns what ensure returns, unless the server refused it
// for want of storage and existing finds the stream or bucket: then that,
// with a warning.
func keepOnFullStore[T any](log *slog.Logger, kind, name string, ensure, existing func() (T, error)) (T, error) {
	v, err := ensure()
	if err == nil || !StorageExhausted(err) {
		return v, err
	}
	if v, xerr := existing(); xerr == nil {
		orDefault(log).Warn("the NATS server's store is smaller than its streams' size limits, so it changes no stream: "+
			kind+" kept as it is; "+storeFullFix, kind, name, "err", err)
		return v, nil
	}
	var zero T
	return zero, err
}

func orDefault(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.Default()
	}
	return log
}
