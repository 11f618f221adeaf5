package clickhouse

import (
	"context"
	"log/slog"
	"time"
)

// slowReads logs every read of the store that takes at least min
// (Config.SlowRead): how long it took, what the engine read for it when
// the transport reports that (the embedded engine does), and the
// statement. The statement carries placeholders, not their values
// (paramSet), so no tenant's names or filter values reach the log.
type slowReads struct {
	transport
	min time.Duration
	log *slog.Logger
}

// readStats is what a transport's rows may report of the read behind them.
type readStats interface {
	readStats() (rowsRead, bytesRead uint64)
}

// maxLoggedSQL bounds the statement text in a slow read's log line.
const maxLoggedSQL = 400

func (t *slowReads) query(ctx context.Context, sql string, params map[string]string) (rows, error) {
	start := time.Now()
	rs, err := t.transport.query(ctx, sql, params)
	if d := time.Since(start); d >= t.min {
		attrs := []any{"elapsed_ms", float64(d.Microseconds()) / 1000}
		if s, ok := rs.(readStats); ok && err == nil {
			n, b := s.readStats()
			attrs = append(attrs, "rows_read", n, "bytes_read", b)
		}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		if len(sql) > maxLoggedSQL {
			sql = sql[:maxLoggedSQL] + "…"
		}
		t.log.Warn("clickhouse read slow", append(attrs, "sql", sql)...)
	}
	return rs, err
}
