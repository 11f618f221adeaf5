package gateway

import (
	"regexp"
)

// microTimeRE finds an event's times in protojson output (which may put
// a space after a colon).
var microTimeRE = regexp.MustCompile(`("(?:eventTime|lastObservedTime)":\s*"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z"`)

// microTimes writes an event's eventTime and series.lastObservedTime with
// exactly six fractional digits, as Kubernetes writes a MicroTime (and as
// its clients parse one); protojson writes 0, 3, 6 or 9 as needed. The
// server keeps these times to the microsecond.
func microTimes(b []byte) []byte {
	return microTimeRE.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := microTimeRE.FindSubmatch(m)
		frac := string(sub[2])
		if len(frac) > 6 {
			frac = frac[:6]
		}
		for len(frac) < 6 {
			frac += "0"
		}
		out := make([]byte, 0, len(sub[1])+9)
		out = append(out, sub[1]...)
		return append(append(append(out, '.'), frac...), 'Z', '"')
	})
}
