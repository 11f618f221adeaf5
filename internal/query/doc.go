// Package query is the read model of eventgate: what a caller may see
// (Scope), which events it asks for (Filter), a page of a listing (List,
// Page, Lookup) and the analytics requests and answers (Histogram, Top,
// Facets, Series) with their limits.
//
// The service builds these from API requests; a store (internal/clickhouse)
// answers them. Validation that does not depend on the store lives here, so
// every store refuses the same requests with the same FieldError.
package query
