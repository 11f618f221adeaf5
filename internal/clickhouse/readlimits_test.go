package clickhouse

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/query"
)

// TestReadLimitsStopAStatement: a statement over a ReadLimits limit fails
// with a *query.ReadLimitError naming it, on both transports; under them it
// answers as without them.
func TestReadLimitsStopAStatement(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		rv := insert(t, s, 1, filterEvents()...)
		for _, tc := range []struct {
			l    query.ReadLimits
			want string
		}{
			{query.ReadLimits{MaxRowsToRead: 2}, "maxRowsToRead"},
			{query.ReadLimits{MaxBytesToRead: 16}, "maxBytesToRead"},
		} {
			ctx := query.WithReadLimits(context.Background(), tc.l)
			_, err := s.Query(ctx, query.List{Scope: all}, rv)
			var rle *query.ReadLimitError
			if !errors.As(err, &rle) || rle.Limit != tc.want || !errors.Is(err, query.ErrReadLimit) {
				t.Errorf("%+v: %v, want a ReadLimitError naming %s", tc.l, err, tc.want)
			}
			if _, err := s.Get(ctx, all, query.Lookup{UID: "e3"}); !errors.As(err, &rle) {
				t.Errorf("Get under %+v: %v, want a ReadLimitError", tc.l, err)
			}
		}
		ctx := query.WithReadLimits(context.Background(), query.ReadLimits{MaxExecutionTime: time.Minute, MaxRowsToRead: 1_000_000, MaxBytesToRead: 1 << 30})
		p, err := s.Query(ctx, query.List{Scope: all}, rv)
		if err != nil || len(p.Events) != len(filterEvents()) {
			t.Fatalf("under the limits: %v, %d events", err, len(p.Events))
		}
	})
}

func TestWithReadLimitsKeepsTheStatementsOwnSettings(t *testing.T) {
	ctx := query.WithReadLimits(context.Background(), query.ReadLimits{MaxExecutionTime: time.Second, MaxRowsToRead: 10, MaxBytesToRead: 20})
	got, added := withReadLimits(ctx, "SELECT 1 SETTINGS max_execution_time = 30, timeout_overflow_mode = 'throw'")
	want := "SELECT 1 SETTINGS max_execution_time = 30, timeout_overflow_mode = 'throw', max_rows_to_read = 10, read_overflow_mode = 'throw', max_bytes_to_read = 20"
	if got != want || len(added) != 2 {
		t.Errorf("got %q (%d added)\nwant %q", got, len(added), want)
	}
	got, _ = withReadLimits(ctx, "SELECT 1")
	if !strings.HasPrefix(got, "SELECT 1 SETTINGS max_execution_time = 1, timeout_overflow_mode = 'throw', max_rows_to_read = 10") {
		t.Errorf("no SETTINGS of its own: %q", got)
	}
	if got, added := withReadLimits(context.Background(), "SELECT 1"); got != "SELECT 1" || added != nil {
		t.Errorf("without limits: %q %v", got, added)
	}
}
