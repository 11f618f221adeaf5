package clickhouse

import (
	"time"

	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// SeriesMinute is the occurrences a write adds in one minute, as the
// events stream's HeaderSeriesMinutes carries it.
type SeriesMinute = wire.Minute

// minuteColumns are the events columns minutes and minute_counts of ms:
// two arrays in step (the analytics view ARRAY JOINs them).
func minuteColumns(ms []SeriesMinute) ([]time.Time, []uint32) {
	starts, counts := make([]time.Time, 0, len(ms)), make([]uint32, 0, len(ms))
	for _, m := range ms {
		if m.Count == 0 || m.Start.Before(zeroTime) {
			continue
		}
		starts = append(starts, m.Start.UTC().Truncate(time.Minute))
		counts = append(counts, m.Count)
	}
	return starts, counts
}
