package query

import (
	"errors"
	"fmt"
	"time"
)

// Errors of a listing and a lookup.
var (
	// ErrNotFound: no event matches, or it is outside the caller's scope.
	ErrNotFound = errors.New("event not found")
	// ErrBadPageToken: the page token is malformed or was issued for another
	// filter or order.
	ErrBadPageToken = errors.New("invalid page token")
	// ErrInvalidQuery: the filter itself is invalid (wrapped with details).
	ErrInvalidQuery = errors.New("invalid query")
)

// TenantRef names a tenant; Name "*" stands for every tenant of Type. The
// global tenant's name is "".
type TenantRef struct {
	Type string
	Name string
	// Kinds, in a Scope, restricts the tenant to events regarding these
	// kinds; empty allows every kind. Ignored in a Filter.
	Kinds []GroupKind
}

// GroupKind names a kind of regarding object; Group "" is the core group.
type GroupKind struct {
	Group string
	Kind  string
}

// Scope is what the caller may see, built by authorization. A store ANDs it
// into every statement; the zero Scope sees nothing.
type Scope struct {
	All     bool
	Tenants []TenantRef
}

// Empty reports a scope that sees nothing.
func (s Scope) Empty() bool { return !s.All && len(s.Tenants) == 0 }

// SeveralTenants reports a scope that may span more than one tenant.
func (s Scope) SeveralTenants() bool {
	if s.All || len(s.Tenants) > 1 {
		return true
	}
	return len(s.Tenants) == 1 && s.Tenants[0].Name == "*"
}

// StringSet constrains a field: In = any of (when not empty), NotIn = none
// of. The zero StringSet constrains nothing.
type StringSet struct {
	In    []string
	NotIn []string
}

// Empty reports a set that constrains nothing.
func (s StringSet) Empty() bool { return len(s.In) == 0 && len(s.NotIn) == 0 }

// ObjectFilter constrains an object reference (regarding or related).
type ObjectFilter struct {
	APIVersion StringSet
	Kind       StringSet
	Namespace  StringSet
	Name       StringSet
	UID        StringSet
	FieldPath  StringSet
}

// Sets are the object's fields, in a fixed order.
func (o ObjectFilter) Sets() []StringSet {
	return []StringSet{o.APIVersion, o.Kind, o.Namespace, o.Name, o.UID, o.FieldPath}
}

// LabelReq is a label selector requirement. Op is one of "=" ("=="), "!=",
// "in", "notin", "exists", "!" (does not exist), with Kubernetes' meaning:
// "!=" and "notin" also match events without the key.
type LabelReq struct {
	Key    string
	Op     string
	Values []string
}

// Filter selects events. Every non-zero field must match.
type Filter struct {
	// Tenant narrows the query to one tenant (Name "*": every tenant of the
	// type) within the Scope.
	Tenant              *TenantRef
	Namespace           StringSet
	Type                StringSet
	Reason              StringSet
	Action              StringSet
	ReportingController StringSet
	ReportingInstance   StringSet
	Regarding           ObjectFilter
	Related             ObjectFilter
	// Involving matches events whose regarding or related object matches.
	Involving *ObjectFilter
	Labels    []LabelReq
	// Since and Until bound eventTime: [Since, Until); zero is open.
	Since time.Time
	Until time.Time
}

// Sets are the event's own fields, in a fixed order (objects apart).
func (f Filter) Sets() []StringSet {
	return []StringSet{f.Namespace, f.Type, f.Reason, f.Action, f.ReportingController, f.ReportingInstance}
}

// MaxFilterValues bounds the values of a query's filter, all its fields
// together (a store sends each value as a parameter).
const MaxFilterValues = 1000

// Validate checks what the type system does not: label operators and their
// values, the values of all fields together, and since before until.
func (f Filter) Validate() error {
	n := 0
	count := func(ss []StringSet) {
		for _, s := range ss {
			n += len(s.In) + len(s.NotIn)
		}
	}
	count(f.Sets())
	count(f.Regarding.Sets())
	count(f.Related.Sets())
	if f.Involving != nil {
		count(f.Involving.Sets()) // both sides
		count(f.Involving.Sets())
	}
	for i, l := range f.Labels {
		if l.Key == "" {
			return fmt.Errorf("%w: labels[%d]: empty key", ErrInvalidQuery, i)
		}
		switch l.Op {
		case "=", "==", "!=":
			if len(l.Values) != 1 {
				return fmt.Errorf("%w: labels[%d]: operator %q takes exactly one value", ErrInvalidQuery, i, l.Op)
			}
		case "in", "notin":
			if len(l.Values) == 0 {
				return fmt.Errorf("%w: labels[%d]: operator %q takes at least one value", ErrInvalidQuery, i, l.Op)
			}
		case "exists", "!":
			if len(l.Values) != 0 {
				return fmt.Errorf("%w: labels[%d]: operator %q takes no values", ErrInvalidQuery, i, l.Op)
			}
		default:
			return fmt.Errorf("%w: labels[%d]: unknown operator %q (want =, !=, in, notin, exists, !)", ErrInvalidQuery, i, l.Op)
		}
		n += 1 + len(l.Values)
	}
	if n > MaxFilterValues {
		return fmt.Errorf("%w: the filter has %d values, more than %d", ErrInvalidQuery, n, MaxFilterValues)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("%w: since (%s) must be before until (%s)", ErrInvalidQuery,
			f.Since.Format(time.RFC3339Nano), f.Until.Format(time.RFC3339Nano))
	}
	return nil
}
