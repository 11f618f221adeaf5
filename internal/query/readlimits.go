package query

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ReadLimits bound what one read statement may cost the engine, so that
// one query cannot exhaust it: ClickHouse's max_execution_time,
// max_rows_to_read and max_bytes_to_read, with their overflow modes set to
// throw (the engine checks rows and bytes against its estimate before it
// reads, so a statement over them fails fast). Zero is no limit.
type ReadLimits struct {
	MaxExecutionTime time.Duration
	MaxRowsToRead    int64
	MaxBytesToRead   int64
}

type readLimitsKey struct{}

// WithReadLimits makes the store's read statements on ctx carry l, as
// clickhouse-go carries per-query settings in the context. A limit the
// statement sets itself (analytics' max_execution_time) is kept.
func WithReadLimits(ctx context.Context, l ReadLimits) context.Context {
	return context.WithValue(ctx, readLimitsKey{}, l)
}

// ReadLimitsFrom returns the read limits WithReadLimits put on ctx.
func ReadLimitsFrom(ctx context.Context) (ReadLimits, bool) {
	l, ok := ctx.Value(readLimitsKey{}).(ReadLimits)
	return l, ok
}

// ErrReadLimit is matched (errors.Is) by every *ReadLimitError.
var ErrReadLimit = errors.New("query over a read limit")

// ReadLimitError is a statement the engine stopped at a ReadLimits limit.
type ReadLimitError struct {
	// Limit is the limit's name in the configuration: maxExecutionTime,
	// maxRowsToRead or maxBytesToRead.
	Limit string
	// Value is the limit, as the configuration reads it.
	Value string
}

func (e *ReadLimitError) Error() string {
	switch e.Limit {
	case "maxExecutionTime":
		return fmt.Sprintf("the query ran longer than %s (limit %s)", e.Value, e.Limit)
	case "maxRowsToRead":
		return fmt.Sprintf("the query would read more than %s rows (limit %s)", e.Value, e.Limit)
	}
	return fmt.Sprintf("the query would read more than %s bytes (limit %s)", e.Value, e.Limit)
}

func (e *ReadLimitError) Is(target error) bool { return target == ErrReadLimit }
