package clickhouse

import (
	"context"
	"log/slog"
	"time"
)

// slowReads logs every read of the store that takes at least min
// (Config.SlowRead): how long it took, what the engine reports of it when
// the transport has that (the embedded engine: its own time on the
// statement, the wait for a connection before, the rows and bytes of the
// result), and the statement. The statement carries placeholders, not their values
// (paramSet), so no tenant's names or filter values reach the log.
type slowReads struct {
	transport
	min time.Duration
	log *slog.Logger
}

// readStats is what the embedded engine reports of a read: the rows and
// bytes of its result (the library's "rows read" counts those, not what
// the statement read from its tables: 1 for a count over a million rows),
// the time it spent on the statement, and how long the statement waited
// for a connection before.
type readStats struct {
	resultRows, resultBytes uint64
	engine, wait            time.Duration
}

// statsReporter is rows that report their read's readStats.
type statsReporter interface {
	readStats() readStats
}

// maxLoggedSQL bounds the statement text in a slow read's log line.
const maxLoggedSQL = 400

func (t *slowReads) query(ctx context.Context, sql string, params map[string]string) (rows, error) {
	start := time.Now()
	rs, err := t.transport.query(ctx, sql, params)
	if d := time.Since(start); d >= t.min {
		attrs := []any{"elapsed_ms", float64(d.Microseconds()) / 1000}
		if r, ok := rs.(statsReporter); ok && err == nil {
			st := r.readStats()
			attrs = append(attrs, "result_rows", st.resultRows, "result_bytes", st.resultBytes,
				"engine_ms", float64(st.engine.Microseconds())/1000, "wait_ms", float64(st.wait.Microseconds())/1000)
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
