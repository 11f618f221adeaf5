package query

import (
	"slices"
	"time"
)

// FacetsRequest asks for the values of several dimensions.
type FacetsRequest struct {
	Analytics
	// Dimensions default to DefaultFacetDimensions.
	Dimensions []string
	// Limit is the values returned per dimension (default 20).
	Limit int
}

// Facets holds one facet per dimension, in the request's order.
type Facets struct {
	Since, Until time.Time
	// Total is the occurrences in the window.
	Total  int64
	Facets []Facet
}

// Facet is the values of one dimension, most occurrences first.
type Facet struct {
	Dimension string
	Values    []FacetValue
	// Distinct counts the values in the window; Other adds up the
	// occurrences of those not listed.
	Distinct int
	Other    int64
}

// FacetValue is one value and its occurrences.
type FacetValue struct {
	Value string
	Count int64
}

// FacetsPlan is a checked FacetsRequest.
type FacetsPlan struct {
	Since, Until time.Time
	Dimensions   []string
	Limit        int
	Limits       Limits
}

// Plan checks the request against its limits and resolves its defaults.
func (r FacetsRequest) Plan() (FacetsPlan, error) {
	l := r.HardLimits()
	since, until, err := r.Window()
	if err != nil {
		return FacetsPlan{}, err
	}
	names := r.Dimensions
	if len(names) == 0 {
		names = DefaultFacetDimensions
	}
	if len(names) > l.MaxFacetDimensions {
		return FacetsPlan{}, OverLimit("dimensions", "MaxFacetDimensions", "%d dimensions, more than %d", len(names), l.MaxFacetDimensions)
	}
	for i, n := range names {
		if err := CheckDimension("dimensions", n, r.Scope); err != nil {
			return FacetsPlan{}, err
		}
		if slices.Contains(names[:i], n) {
			return FacetsPlan{}, BadField("dimensions", "dimension %q twice", n)
		}
	}
	limit, err := limitOf("limit", "MaxFacetLimit", r.Limit, DefaultFacetLimit, l.MaxFacetLimit)
	if err != nil {
		return FacetsPlan{}, err
	}
	return FacetsPlan{Since: since, Until: until, Dimensions: names, Limit: limit, Limits: l}, nil
}
