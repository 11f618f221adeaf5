// Package wire owns the events stream's message headers and the encoding of
// their values. The intake writes them and the ClickHouse ingest reads them;
// both import this package, which imports nothing of NATS, so the store's
// adapter can read the contract without knowing the broker.
package wire

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Headers on an events message. Both may be absent: an event published by
// an older gateway, or by anything but the intake, has neither.
const (
	// HeaderWriteReason says why the version was written: a series.Reason
	// name ("created", "started", "flush", "heartbeat", "finished",
	// "evicted") or ReasonClient.
	HeaderWriteReason = "Eventgate-Write-Reason"
	// HeaderSeriesMinutes lists the occurrences the write adds per minute of
	// log time, "<unix minute>=<count>,…" (unix minute = Unix seconds / 60),
	// deltas since the uid's previous write. Over all writes of one uid
	// (deduplicated by Nats-Msg-Id) they sum to its count.
	HeaderSeriesMinutes = "Eventgate-Series-Minutes"
	// ReasonClient is the write reason of an event its emitter aggregated
	// itself, stored as it is.
	ReasonClient = "client"
)

// Minute is the occurrences a write adds in one minute.
type Minute struct {
	// Start is the minute's first instant (UTC).
	Start time.Time
	Count uint32
}

// maxHeaderMinutes bounds one header's entries (a write normally carries
// the minutes since the previous one, 30 s to 5 min apart).
const maxHeaderMinutes = 100_000

// ErrMinutes is wrapped by every ParseMinutes error.
var ErrMinutes = errors.New("invalid " + HeaderSeriesMinutes + " header")

// ParseMinutes decodes a HeaderSeriesMinutes value: entries in ascending
// minute order, a minute listed twice added up, zero counts dropped. "" is
// no minutes.
func ParseMinutes(s string) ([]Minute, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if n := strings.Count(s, ",") + 1; n > maxHeaderMinutes {
		return nil, fmt.Errorf("%w: %d entries, more than %d", ErrMinutes, n, maxHeaderMinutes)
	}
	// ClickHouse's DateTime holds minutes up to 2106-02-07.
	const maxMinute = math.MaxUint32 / 60
	sum := map[int64]uint64{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%w: entry %q has no '='", ErrMinutes, part)
		}
		m, err := strconv.ParseInt(k, 10, 64)
		if err != nil || m < 0 || m > maxMinute {
			return nil, fmt.Errorf("%w: bad unix minute %q", ErrMinutes, k)
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: bad count %q", ErrMinutes, v)
		}
		sum[m] += n
	}
	out := make([]Minute, 0, len(sum))
	for m, n := range sum {
		if n == 0 {
			continue
		}
		out = append(out, Minute{Start: time.Unix(m*60, 0).UTC(), Count: uint32(min(n, math.MaxUint32))})
	}
	slices.SortFunc(out, func(a, b Minute) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// FormatMinutes encodes ms as a HeaderSeriesMinutes value; "" for none.
func FormatMinutes(ms []Minute) string {
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
