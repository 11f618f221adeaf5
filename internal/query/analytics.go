package query

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Limits are the hard limits of analytics calls. A request beyond one is
// refused with a *FieldError naming it.
type Limits struct {
	// MaxRange bounds a window (until - since). Top also reads the previous
	// window of the same length.
	MaxRange time.Duration
	// MaxBuckets bounds a histogram's buckets, MaxGroupBy its dimensions.
	MaxBuckets int
	MaxGroupBy int
	// MaxGroups bounds the distinct groups (value pairs) of a histogram and
	// the distinct values of a Top or Facets dimension in the window.
	MaxGroups int
	// MaxCells bounds a histogram's (bucket, group) cells before the cut
	// to its top groups; the engine stops the aggregation there.
	MaxCells int
	// MaxHistogramLimit bounds the groups a histogram returns (the rest are
	// added up as "other").
	MaxHistogramLimit int
	// MaxTopLimit bounds the values Top returns.
	MaxTopLimit int
	// MaxFacetDimensions and MaxFacetLimit bound Facets' dimensions and the
	// values returned per dimension.
	MaxFacetDimensions int
	MaxFacetLimit      int
	// MaxSeriesLimit bounds the series returned, MaxSeriesPoints their
	// per-minute occurrences together.
	MaxSeriesLimit  int
	MaxSeriesPoints int
	// MaxExecutionTime bounds one statement in the engine (the embedded
	// engine cannot cancel a running statement).
	MaxExecutionTime time.Duration
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxRange:           31 * 24 * time.Hour,
		MaxBuckets:         1000,
		MaxGroupBy:         2,
		MaxGroups:          10_000,
		MaxCells:           1_000_000,
		MaxHistogramLimit:  100,
		MaxTopLimit:        1000,
		MaxFacetDimensions: 8,
		MaxFacetLimit:      1000,
		MaxSeriesLimit:     500,
		MaxSeriesPoints:    100_000,
		MaxExecutionTime:   30 * time.Second,
	}
}

// Defaults of analytics requests.
const (
	DefaultWindow         = 24 * time.Hour
	DefaultHistogramLimit = 10
	DefaultTopLimit       = 10
	DefaultFacetLimit     = 20
	DefaultSeriesLimit    = 50
)

// FieldError is an analytics request refused: a field is invalid, or the
// request exceeds a hard limit (Limit names it). It wraps ErrInvalidQuery.
type FieldError struct {
	// Field is the request field at fault, e.g. "bucket".
	Field string
	// Limit is the Limits field exceeded, e.g. "MaxBuckets"; "" for a
	// plainly invalid value.
	Limit string
	// Description says what is wrong.
	Description string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail() }

// Detail is the description with the limit's name.
func (e *FieldError) Detail() string {
	if e.Limit != "" {
		return e.Description + " (limit " + e.Limit + ")"
	}
	return e.Description
}

func (e *FieldError) Unwrap() error { return ErrInvalidQuery }

// BadField is a FieldError for an invalid value.
func BadField(field, format string, args ...any) error {
	return &FieldError{Field: field, Description: fmt.Sprintf(format, args...)}
}

// OverLimit is a FieldError for a value beyond the limit named.
func OverLimit(field, limit, format string, args ...any) error {
	return &FieldError{Field: field, Limit: limit, Description: fmt.Sprintf(format, args...)}
}

// Analytics is what every analytics request reads: the events matching
// Filter within Scope, in the window Filter.Since..Filter.Until (defaults:
// until now, since DefaultWindow before until).
type Analytics struct {
	Scope  Scope
	Filter Filter
	// Limits, when not nil, replaces DefaultLimits.
	Limits *Limits
	// Now, when not zero, is the time the default window ends at.
	Now time.Time
}

// HardLimits returns the request's limits.
func (q Analytics) HardLimits() Limits {
	if q.Limits != nil {
		return *q.Limits
	}
	return DefaultLimits()
}

// Window resolves the window and checks it and the filter.
func (q Analytics) Window() (since, until time.Time, err error) {
	l := q.HardLimits()
	until, since = q.Filter.Until, q.Filter.Since
	if until.IsZero() {
		until = q.Now
		if until.IsZero() {
			until = time.Now()
		}
	}
	if since.IsZero() {
		since = until.Add(-DefaultWindow)
	}
	if !since.Before(until) {
		return since, until, BadField("until", "must be after since (%s)", since.Format(time.RFC3339Nano))
	}
	if d := until.Sub(since); d > l.MaxRange {
		return since, until, OverLimit("since", "MaxRange", "the window spans %s, more than %s", d.Round(time.Second), l.MaxRange)
	}
	f := q.Filter
	f.Since, f.Until = since, until
	if err := f.Validate(); err != nil {
		return since, until, err
	}
	return since, until, nil
}

// limitOf resolves a request's limit field: def for zero, refused beyond
// maxV (the limit named limit).
func limitOf(field, limit string, v, def, maxV int) (int, error) {
	switch {
	case v < 0:
		return 0, BadField(field, "must not be negative")
	case v == 0:
		return def, nil
	case v > maxV:
		return 0, OverLimit(field, limit, "%d is more than %d", v, maxV)
	}
	return v, nil
}

// Dimensions analytics can group by, as the API spells them.
const (
	DimType                = "type"
	DimReason              = "reason"
	DimAction              = "action"
	DimRegardingKind       = "regarding.kind"
	DimNamespace           = "namespace"
	DimReportingController = "reportingController"
	DimReportingInstance   = "reportingInstance"
	// DimRegardingName is the regarding object's name; DimRegardingObject
	// names it whole, "namespace/name" (just "name" without a namespace);
	// DimRegarding is "Kind/namespace/name".
	DimRegardingName   = "regarding.name"
	DimRegardingObject = "regarding.namespacedName"
	DimRegarding       = "regarding"
	// DimRelated is the related object as "Kind/namespace/name"; "" for
	// events without one.
	DimRelated = "related"
	// DimTenant is "type/name" ("global" for the global tenant); only for a
	// scope of several tenants.
	DimTenant = "tenant"
	// DimLabelPrefix and DimMetadataPrefix name a label or metadata key:
	// "labels.app" groups by the value of label app ("" where unset).
	DimLabelPrefix    = "labels."
	DimMetadataPrefix = "metadata."
)

// Dimensions lists every dimension but the keyed ones (labels.<key>,
// metadata.<key>).
var Dimensions = []string{DimType, DimReason, DimAction, DimRegardingKind, DimNamespace, DimReportingController,
	DimReportingInstance, DimRegardingName, DimRegardingObject, DimRegarding, DimRelated, DimTenant}

// DefaultFacetDimensions are Facets' dimensions when none are asked for.
var DefaultFacetDimensions = []string{DimType, DimReason, DimRegardingKind, DimNamespace, DimReportingController}

// MaxDimensionKey bounds the key of a labels.<key> or metadata.<key>
// dimension (a Kubernetes label key has at most 253 + 1 + 63 characters).
const MaxDimensionKey = 317

// DimensionKey splits a keyed dimension into its prefix and key; ok is
// false for the others.
func DimensionKey(name string) (prefix, key string, ok bool) {
	for _, p := range []string{DimLabelPrefix, DimMetadataPrefix} {
		if k, found := strings.CutPrefix(name, p); found {
			return p, k, true
		}
	}
	return "", "", false
}

// CheckDimension refuses an unknown dimension, a keyed one without a key,
// and grouping by tenant without a scope of several tenants; field is the
// request field named.
func CheckDimension(field, name string, sc Scope) error {
	if _, key, ok := DimensionKey(name); ok {
		if key == "" || len(key) > MaxDimensionKey {
			return BadField(field, "dimension %q needs a key of 1 to %d characters", name, MaxDimensionKey)
		}
		return nil
	}
	if !slices.Contains(Dimensions, name) {
		return BadField(field, "unknown dimension %q; one of %s, labels.<key> or metadata.<key>", name, strings.Join(Dimensions, ", "))
	}
	if name == DimTenant && !sc.SeveralTenants() {
		return BadField(field, "dimension %q needs a caller who may read several tenants and a request that names none or a whole tenant type", name)
	}
	return nil
}
