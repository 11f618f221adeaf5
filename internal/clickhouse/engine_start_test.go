package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
)

// recordLog is a slog handler that keeps the messages it is given.
type recordLog struct{ msgs *[]string }

func (h recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h recordLog) Handle(_ context.Context, r slog.Record) error {
	*h.msgs = append(*h.msgs, r.Message)
	return nil
}
func (h recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordLog) WithGroup(string) slog.Handler      { return h }

// A start whose table load failed (the engine's ASYNC_LOAD_WAIT_FAILED, as
// a migration statement reports it) or whose connection the engine refused
// is followed by another; the store then opened on the real engine works.
func TestOpenStartsTheEngineAgainAfterAFailedStart(t *testing.T) {
	chtest.Engine(t)
	loadFailed := fmt.Errorf("clickhouse: migrate: read versions: %w", &chdb.Error{Code: chdb.CodeAsyncLoadWaitFailed,
		Message: "Code: 695. DB::Exception: Load job 'load table eventgate.series_minute_totals' failed: recursive_mutex lock failed: Invalid argument. (ASYNC_LOAD_WAIT_FAILED)"})
	refused := fmt.Errorf("clickhouse: open embedded engine: %w for path /data", chdb.ErrConnect)
	for _, first := range []error{loadFailed, refused} {
		var msgs []string
		cfg := DefaultConfig()
		cfg.DataDir, cfg.Database = chtest.DataDir(), chtest.Database(t)
		// No nice values: an engine opened with them renices the
		// process's background engine threads, which the engine shares
		// with every other test's (TestWriterNice counts them).
		cfg.IngestNice = 0
		calls := 0
		s, err := startEngine(context.Background(), slog.New(recordLog{&msgs}), engineStarts, func() (*Store, error) {
			calls++
			if calls == 1 {
				return nil, first
			}
			return openEmbedded(context.Background(), cfg, nil)
		})
		if err != nil {
			t.Fatalf("after %v: %v", first, err)
		}
		if calls != 2 || len(msgs) != 1 || !strings.Contains(msgs[0], "starting it again") {
			t.Fatalf("after %v: %d starts, log %q; want 2 starts and one warning", first, calls, msgs)
		}
		if err := s.Ping(context.Background()); err != nil {
			t.Fatalf("store after the second start: %v", err)
		}
		s.Close()
	}
}

// Other errors end Open at once, and a start that keeps failing is given
// up after engineStarts attempts with its own error.
func TestOpenGivesUpOnOtherErrorsAndAfterThreeStarts(t *testing.T) {
	other := errors.New("clickhouse: migrate: permission denied")
	calls := 0
	_, err := startEngine(context.Background(), nil, engineStarts, func() (*Store, error) {
		calls++
		return nil, other
	})
	if !errors.Is(err, other) || calls != 1 {
		t.Fatalf("other error: %d starts, %v; want 1 start and the error", calls, err)
	}
	calls = 0
	_, err = startEngine(context.Background(), nil, engineStarts, func() (*Store, error) {
		calls++
		return nil, fmt.Errorf("start %d: %w", calls, chdb.ErrConnect)
	})
	if !errors.Is(err, chdb.ErrConnect) || calls != engineStarts || !strings.Contains(err.Error(), fmt.Sprintf("start %d", engineStarts)) {
		t.Fatalf("refused every time: %d starts, %v; want %d and the last error", calls, err, engineStarts)
	}
}
