// Package rules acts on events: a tenant's rules (a filter, a condition, a
// destination) are stored in a JetStream KV bucket and watched by every
// replica (store.go); the rules are split into shards, and each shard is
// evaluated by exactly one replica at a time, which holds its lease in KV
// (lease.go), reads the events of its rules' tenants from the shard's
// checkpoint with an ordered consumer filtered by their subjects (feed.go)
// and evaluates the conditions in log time (eval.go, shard.go). What fires becomes a notification queued, under a
// deterministic id, in the notifications stream: a replica taking a shard
// over replays from the checkpoint and queues the same ids again, which the
// stream's duplicate window drops. Package notify delivers the queue.
//
// The rule itself (its types, validation and keys) is package rule's,
// which has no NATS dependency; the names below re-export it.
package rules

import "github.com/eventgate/eventgate/internal/rules/rule"

// The rule domain, re-exported from package rule.
type (
	Tenant      = rule.Tenant
	GroupKind   = rule.GroupKind
	Rule        = rule.Rule
	Condition   = rule.Condition
	Destination = rule.Destination
	FieldError  = rule.FieldError
)

// Errors of the store.
var (
	ErrNotFound = rule.ErrNotFound
	ErrExists   = rule.ErrExists
	ErrConflict = rule.ErrConflict
)

// Condition kinds.
const (
	KindEvery    = rule.KindEvery
	KindCount    = rule.KindCount
	KindSeries   = rule.KindSeries
	KindAbsence  = rule.KindAbsence
	KindRecovery = rule.KindRecovery
)

// Destination kinds.
const (
	DestWebhook     = rule.DestWebhook
	DestSlack       = rule.DestSlack
	DestCloudEvents = rule.DestCloudEvents
	DestNATS        = rule.DestNATS
)
