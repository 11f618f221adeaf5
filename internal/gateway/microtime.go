package gateway

import (
	"regexp"
)

// microTimeRE finds an event's times in protojson output (which may put
// a space after a colon): the time up to its seconds, then its fraction.
var microTimeRE = regexp.MustCompile(`"(?:eventTime|lastObservedTime)":\s*"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(\d{1,9}))?Z"`)

// microTimes writes an event's eventTime and series.lastObservedTime with
// exactly six fractional digits, as Kubernetes writes a MicroTime (and as
// its clients parse one); protojson writes 0, 3, 6 or 9 as needed. The
// server keeps these times to the microsecond.
func microTimes(b []byte) []byte {
	var out []byte
	last := 0
	for _, m := range microTimeRE.FindAllSubmatchIndex(b, -1) {
		fracStart, fracEnd := m[2], m[3] // -1, -1 without a fraction
		if fracEnd-fracStart == 6 {
			continue
		}
		secEnd := m[1] - len(`Z"`)
		if fracStart >= 0 {
			secEnd = fracStart - 1
		}
		frac := []byte("000000")
		if fracStart >= 0 {
			copy(frac, b[fracStart:min(fracEnd, fracStart+6)])
		}
		out = append(out, b[last:secEnd]...)
		out = append(append(append(out, '.'), frac...), 'Z', '"')
		last = m[1]
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}
