package query

import (
	"strings"
	"time"
)

// TopRequest asks for the top values of one dimension.
type TopRequest struct {
	Analytics
	Dimension string
	// Limit is the values returned (default 10).
	Limit int
}

// Top is the top values of a dimension in the window, compared with the
// previous window of the same length.
type Top struct {
	Since, Until, PreviousSince time.Time
	Entries                     []TopEntry
	// Total and PreviousTotal are the occurrences of all values.
	Total, PreviousTotal int64
	// Other is the occurrences in the window of the values not listed.
	Other int64
	// Distinct counts the values with occurrences in the window.
	Distinct int
}

// TopEntry is one value.
type TopEntry struct {
	Value           string
	Count, Previous int64
	// Share is Count / Total.
	Share float64
}

// TopPlan is a checked TopRequest.
type TopPlan struct {
	Since, Until, PreviousSince time.Time
	Limit                       int
	Limits                      Limits
}

// Plan checks the request against its limits and resolves its defaults.
func (r TopRequest) Plan() (TopPlan, error) {
	l := r.HardLimits()
	since, until, err := r.Window()
	if err != nil {
		return TopPlan{}, err
	}
	if r.Dimension == "" {
		return TopPlan{}, BadField("dimension", "is required; one of %s", strings.Join(Dimensions, ", "))
	}
	if err := CheckDimension("dimension", r.Dimension, r.Scope); err != nil {
		return TopPlan{}, err
	}
	limit, err := limitOf("limit", "MaxTopLimit", r.Limit, DefaultTopLimit, l.MaxTopLimit)
	if err != nil {
		return TopPlan{}, err
	}
	return TopPlan{Since: since, Until: until, PreviousSince: since.Add(-until.Sub(since)), Limit: limit, Limits: l}, nil
}
