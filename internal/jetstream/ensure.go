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
	log = orDefault(log)
	s, err := js.CreateOrUpdateStream(ctx, sc)
	if err == nil || !StorageExhausted(err) {
		return s, err
	}
	if s, serr := js.Stream(ctx, sc.Name); serr == nil {
		log.Warn("the NATS server's store is smaller than its streams' size limits, so it changes no stream: stream kept as it is; "+storeFullFix,
			"stream", sc.Name, "err", err)
		return s, nil
	}
	return nil, err
}

// CreateOrUpdateKeyValue is CreateOrUpdateStream for the bucket kc names.
func CreateOrUpdateKeyValue(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig, log *slog.Logger) (jetstream.KeyValue, error) {
	log = orDefault(log)
	kv, err := js.CreateOrUpdateKeyValue(ctx, kc)
	if err == nil || !StorageExhausted(err) {
		return kv, err
	}
	if kv, kerr := js.KeyValue(ctx, kc.Bucket); kerr == nil {
		log.Warn("the NATS server's store is smaller than its streams' size limits, so it changes no stream: key-value bucket kept as it is; "+storeFullFix,
			"bucket", kc.Bucket, "err", err)
		return kv, nil
	}
	return nil, err
}

func orDefault(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.Default()
	}
	return log
}
