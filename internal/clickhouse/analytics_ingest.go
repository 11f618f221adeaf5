package clickhouse

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Headers the intake sets on the events messages it writes (the same names
// as the intake's own constants; the ingest reads them, it does not need the
// intake package). Both may be absent: an event published by an older
// gateway, or by anything but the intake, has neither.
const (
	// HeaderWriteReason says why the version was written: a series.Reason
	// name ("created", "started", "flush", "heartbeat", "finished",
	// "evicted") or "client" for an event its emitter aggregated itself.
	HeaderWriteReason = "Eventgate-Write-Reason"
	// HeaderSeriesMinutes lists the occurrences the write adds per minute of
	// log time, "<unix minute>=<count>,…" (unix minute = Unix seconds / 60),
	// deltas since the uid's previous write.
	HeaderSeriesMinutes = "Eventgate-Series-Minutes"
)

// SeriesMinute is the occurrences a write adds in one minute.
type SeriesMinute struct {
	// Start is the minute's first instant (UTC).
	Start time.Time
	Count uint32
}

// maxHeaderMinutes bounds one header's entries (a write normally carries
// the minutes since the previous one, 30 s to 5 min apart).
const maxHeaderMinutes = 100_000

// errMinutes is wrapped by every ParseSeriesMinutes error.
var errMinutes = errors.New("invalid " + HeaderSeriesMinutes + " header")

// ParseSeriesMinutes decodes a HeaderSeriesMinutes value: entries in
// ascending minute order, a minute listed twice added up, zero counts
// dropped. "" is no minutes.
func ParseSeriesMinutes(s string) ([]SeriesMinute, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if n := strings.Count(s, ",") + 1; n > maxHeaderMinutes {
		return nil, fmt.Errorf("%w: %d entries, more than %d", errMinutes, n, maxHeaderMinutes)
	}
	// DateTime holds minutes up to 2106-02-07.
	const maxMinute = math.MaxUint32 / 60
	sum := map[int64]uint64{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%w: entry %q has no '='", errMinutes, part)
		}
		m, err := strconv.ParseInt(k, 10, 64)
		if err != nil || m < 0 || m > maxMinute {
			return nil, fmt.Errorf("%w: bad unix minute %q", errMinutes, k)
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: bad count %q", errMinutes, v)
		}
		sum[m] += n
	}
	out := make([]SeriesMinute, 0, len(sum))
	for m, n := range sum {
		if n == 0 {
			continue
		}
		out = append(out, SeriesMinute{Start: time.Unix(m*60, 0).UTC(), Count: uint32(min(n, math.MaxUint32))})
	}
	slices.SortFunc(out, func(a, b SeriesMinute) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// FormatSeriesMinutes encodes ms as a HeaderSeriesMinutes value.
func FormatSeriesMinutes(ms []SeriesMinute) string {
	var b strings.Builder
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(m.Start.Unix()/60, 10))
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(uint64(m.Count), 10))
	}
	return b.String()
}

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
