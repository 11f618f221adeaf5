package jetstream

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A server whose store became smaller than its streams' size limits (the
// disk filled up between two starts) refuses to change any stream, even to
// the configuration it has. CreateOrUpdateStream and CreateOrUpdateKeyValue
// then keep the existing stream and bucket as they are, with a warning, and
// they still take messages; a stream that does not exist still fails.
func TestStoreSmallerThanTheStreamsKeepsThemAsTheyAre(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc := jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept.>"}, Storage: jetstream.FileStorage, MaxBytes: 512 << 20}
	kc := jetstream.KeyValueConfig{Bucket: "kept", History: 1, Storage: jetstream.FileStorage}

	// open starts the embedded server on dir with a store of maxStore bytes.
	open := func(maxStore int64) (jetstream.JetStream, func()) {
		t.Helper()
		ns, err := EmbeddedStore(dir, "", maxStore)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := Connect(Config{}, ns, t.Name())
		if err != nil {
			ns.Shutdown()
			t.Fatal(err)
		}
		stop := func() {
			nc.Close()
			ns.Shutdown()
			ns.WaitForShutdown()
		}
		js, err := NewJetStream(nc)
		if err != nil {
			stop()
			t.Fatal(err)
		}
		return js, stop
	}

	js, stop := open(1 << 30)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if _, err := CreateOrUpdateStream(ctx, js, sc, log); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateOrUpdateKeyValue(ctx, js, kc, log); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 0 {
		t.Fatalf("warned on a store that holds the streams: %s", logs.String())
	}
	stop()

	// The same directory on a store of 256 MiB: less than the stream's limit.
	js, stop = open(256 << 20)
	defer stop()
	if _, err := js.CreateOrUpdateStream(ctx, sc); !StorageExhausted(err) {
		t.Fatalf("the server changed a stream on a store smaller than its limit (err %v): the premise of this test is gone", err)
	}
	s, err := CreateOrUpdateStream(ctx, js, sc, log)
	if err != nil {
		t.Fatalf("existing stream not kept: %v", err)
	}
	if got := s.CachedInfo().Config.MaxBytes; got != sc.MaxBytes {
		t.Errorf("kept stream's MaxBytes = %d, want %d", got, sc.MaxBytes)
	}
	kv, err := CreateOrUpdateKeyValue(ctx, js, kc, log)
	if err != nil {
		t.Fatalf("existing bucket not kept: %v", err)
	}
	for _, want := range []string{"stream=KEPT", "bucket=kept", "--nats-max-store"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("warnings do not mention %q:\n%s", want, logs.String())
		}
	}
	if _, err := js.Publish(ctx, "kept.a", []byte("x")); err != nil {
		t.Errorf("publish to the kept stream: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Errorf("put into the kept bucket: %v", err)
	}
	other := jetstream.StreamConfig{Name: "NEW", Subjects: []string{"new.>"}, Storage: jetstream.FileStorage}
	if _, err := CreateOrUpdateStream(ctx, js, other, log); !StorageExhausted(err) {
		t.Errorf("a new stream on the full store: err %v, want the server's refusal", err)
	}
}
