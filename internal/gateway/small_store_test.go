package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// On a disk too small for the events stream's default size limit (10 GiB,
// which the embedded server reserves in its store), the gateway starts all
// the same: the limit becomes half of what the store holds. A restart on
// the same directory keeps it, and events go through.
func TestSmallStoreLowersTheEventsStreamLimit(t *testing.T) {
	const store = 1 << 30
	dir := t.TempDir()
	small := func(c *config.Config) { c.NATS.MaxStore = store }
	for start := range 2 {
		tg := startGatewayWith(t, dir, small)
		st, err := tg.js.Stream(context.Background(), tg.cfg.NATS.Stream)
		if err != nil {
			tg.stop()
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxBytes; got != store/2 {
			tg.stop()
			t.Fatalf("start %d: the events stream's MaxBytes is %d, want %d (half of the store)", start+1, got, store/2)
		}
		res := emit(t, tg.client, testEvent("Small", "Job", "ns", "small-store"))
		if len(res) != 1 || res[0].GetResourceVersion() == "" {
			tg.stop()
			t.Fatalf("start %d: emit: %v", start+1, res)
		}
		tg.stop()
	}
}

// A store too small for any useful limit stops the start with an error that
// names the fix.
func TestStoreTooSmallForTheEventsStreamNamesTheFix(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.ClickHouse.DataDir = chDir
	cfg.ClickHouse.Database = databaseFor(cfg.DataDir)
	cfg.NATS.MaxStore = 100 << 20 // half of it is under the smallest fitted limit
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		g.Close()
		t.Fatal("the gateway started on a 100 MiB store with a 10 GiB events stream")
	}
	for _, want := range []string{"insufficient storage", "--stream-max-bytes", "free disk space"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start error does not mention %q: %v", want, err)
		}
	}
}

// A gateway restarted on a store that became smaller than its streams'
// limits (the disk filled up since they were created) starts: the server
// then changes no stream, so the gateway keeps its streams and buckets as
// they are, and events go through while the store has room.
func TestStoreShrunkBelowTheEventsStreamStillStarts(t *testing.T) {
	dir := t.TempDir()
	for start, store := range []int64{1 << 30, 256 << 20} {
		tg := startGatewayWith(t, dir, func(c *config.Config) { c.NATS.MaxStore = store })
		st, err := tg.js.Stream(context.Background(), tg.cfg.NATS.Stream)
		if err != nil {
			tg.stop()
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxBytes; got != 512<<20 {
			tg.stop()
			t.Fatalf("start %d (store %d): the events stream's MaxBytes is %d, want %d", start+1, store, got, 512<<20)
		}
		name := fmt.Sprintf("shrunk-store-%d", start)
		res := emit(t, tg.client, testEvent("Shrunk", "Job", "ns", name))
		if len(res) != 1 || res[0].GetResourceVersion() == "" {
			tg.stop()
			t.Fatalf("start %d: emit: %v", start+1, res)
		}
		tg.stop()
	}
}
