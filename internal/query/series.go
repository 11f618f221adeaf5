package query

import (
	"math"
	"time"
)

// Series orders.
const (
	SeriesOrderCount        = "count"
	SeriesOrderLastObserved = "lastObserved"
)

// SeriesRequest asks for the series active in the window: first observed
// (eventTime) before Until, last observed at or after Since.
type SeriesRequest struct {
	Analytics
	// State, when set, is "Ongoing" or "Finished".
	State string
	// Limit is the series returned (default 50).
	Limit int
	// OrderBy is SeriesOrderCount (default) or SeriesOrderLastObserved.
	OrderBy string
}

// SeriesList is the answer to a SeriesRequest.
type SeriesList struct {
	Since, Until time.Time
	Series       []Series
	// Total counts the matching series before the limit.
	Total int
}

// ObjectRef is an object reference as stored.
type ObjectRef struct {
	APIVersion, Kind, Namespace, Name, UID, FieldPath string
}

// Series is one event series at its latest version.
type Series struct {
	UID                                    string
	Tenant                                 TenantRef
	Reason, Type, Action, Namespace        string
	ReportingController, ReportingInstance string
	Regarding                              ObjectRef
	// Count is the latest version's series count.
	Count int64
	// First is the eventTime, Last the lastObservedTime.
	First, Last time.Time
	State       string
	// WindowCount is the occurrences within the window; Minutes holds them
	// per minute, ascending.
	WindowCount int64
	Minutes     []MinutePoint
}

// MinutePoint is the occurrences of one minute.
type MinutePoint struct {
	Minute time.Time
	Count  int64
}

// RatePerMinute is Count over the minutes between First and Last (at least
// one).
func (s Series) RatePerMinute() float64 {
	return float64(s.Count) / math.Max(1, s.Last.Sub(s.First).Minutes())
}

// SeriesPlan is a checked SeriesRequest.
type SeriesPlan struct {
	Since, Until time.Time
	State        string
	// OrderBy is resolved: SeriesOrderCount or SeriesOrderLastObserved.
	OrderBy string
	Limit   int
	Limits  Limits
}

// Plan checks the request against its limits and resolves its defaults.
func (r SeriesRequest) Plan() (SeriesPlan, error) {
	l := r.HardLimits()
	since, until, err := r.Window()
	if err != nil {
		return SeriesPlan{}, err
	}
	switch r.State {
	case "", "Ongoing", "Finished":
	default:
		return SeriesPlan{}, BadField("state", "must be Ongoing or Finished, got %q", r.State)
	}
	order := r.OrderBy
	switch order {
	case "":
		order = SeriesOrderCount
	case SeriesOrderCount, SeriesOrderLastObserved:
	default:
		return SeriesPlan{}, BadField("orderBy", "must be %s or %s, got %q", SeriesOrderCount, SeriesOrderLastObserved, r.OrderBy)
	}
	limit, err := limitOf("limit", "MaxSeriesLimit", r.Limit, DefaultSeriesLimit, l.MaxSeriesLimit)
	if err != nil {
		return SeriesPlan{}, err
	}
	return SeriesPlan{Since: since, Until: until, State: r.State, OrderBy: order, Limit: limit, Limits: l}, nil
}
