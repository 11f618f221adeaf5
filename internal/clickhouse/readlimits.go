package clickhouse

import (
	"context"
	"strconv"
	"strings"

	"github.com/eventgate/eventgate/internal/query"
)

// readLimit is one query.ReadLimits limit as a setting.
type readLimit struct {
	limit, setting, overflow string   // overflow: the setting that makes it throw
	value                    string   // as the setting reads it
	shown                    string   // as the configuration reads it
	markers                  []string // in the engine's error for it (as versions word it)
}

func settingsOf(l query.ReadLimits) []readLimit {
	var out []readLimit
	if l.MaxExecutionTime > 0 {
		out = append(out, readLimit{"maxExecutionTime", "max_execution_time", "timeout_overflow_mode",
			strconv.FormatFloat(l.MaxExecutionTime.Seconds(), 'f', -1, 64), l.MaxExecutionTime.String(), []string{"TIMEOUT_EXCEEDED"}})
	}
	if l.MaxRowsToRead > 0 {
		v := strconv.FormatInt(l.MaxRowsToRead, 10)
		out = append(out, readLimit{"maxRowsToRead", "max_rows_to_read", "read_overflow_mode", v, v, []string{"max_rows_to_read", "to read exceeded, max rows"}})
	}
	if l.MaxBytesToRead > 0 {
		v := strconv.FormatInt(l.MaxBytesToRead, 10)
		out = append(out, readLimit{"maxBytesToRead", "max_bytes_to_read", "read_overflow_mode", v, v, []string{"max_bytes_to_read", "to read exceeded, max bytes"}})
	}
	return out
}

// withReadLimits adds the read limits of ctx to a SELECT the store built:
// to its trailing SETTINGS clause (the store's statements end with theirs,
// and carry every value as a bound parameter, so the text " SETTINGS " is
// that clause), or as one. It returns the limits it added.
func withReadLimits(ctx context.Context, sql string) (string, []readLimit) {
	l, ok := query.ReadLimitsFrom(ctx)
	if !ok {
		return sql, nil
	}
	i := strings.LastIndex(sql, " SETTINGS ")
	own := ""
	if i >= 0 {
		own = sql[i:]
	}
	var added []readLimit
	var set []string
	for _, r := range settingsOf(l) {
		if strings.Contains(own, r.setting) {
			continue
		}
		added = append(added, r)
		set = append(set, r.setting+" = "+r.value)
		if !strings.Contains(own, r.overflow) && !strings.Contains(strings.Join(set, ","), r.overflow) {
			set = append(set, r.overflow+" = 'throw'")
		}
	}
	if len(set) == 0 {
		return sql, nil
	}
	if i >= 0 {
		return sql + ", " + strings.Join(set, ", "), added
	}
	return sql + " SETTINGS " + strings.Join(set, ", "), added
}

// readLimitError names the limit that stopped a statement, when one of
// the added limits did; other errors are returned as they are.
func readLimitError(err error, added []readLimit) error {
	if err == nil || len(added) == 0 {
		return err
	}
	msg := err.Error()
	for _, r := range added {
		for _, m := range r.markers {
			if strings.Contains(msg, m) {
				return &query.ReadLimitError{Limit: r.limit, Value: r.shown}
			}
		}
	}
	return err
}

// limitedRows maps an error the engine reports while rows stream
// (clickhouse-go) as readLimitError does.
type limitedRows struct {
	rows
	added []readLimit
}

func (r limitedRows) Err() error { return readLimitError(r.rows.Err(), r.added) }
