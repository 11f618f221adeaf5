package query

import eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"

// List is one page request of a listing.
type List struct {
	Scope  Scope
	Filter Filter
	// OldestFirst orders by eventTime ascending; the default is newest first.
	OldestFirst bool
	// PageSize is the page length: default DefaultPageSize, at most
	// MaxPageSize.
	PageSize int
	// PageToken continues a previous page (NextPageToken).
	PageToken string
}

// Page is one page of events.
type Page struct {
	Events []*eventgatev1.Event
	// ResourceVersion is the version the page reflects: a watch from it
	// misses nothing and repeats nothing.
	ResourceVersion uint64
	// NextPageToken is set when more events may follow.
	NextPageToken string
}

// Lookup names one event: by UID, or by Namespace and Name (or both).
type Lookup struct {
	UID       string
	Namespace string
	Name      string
	Tenant    *TenantRef
}

// Page sizes.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)
