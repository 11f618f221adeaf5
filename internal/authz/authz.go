// Package authz decides who is calling eventgate and what they may do.
//
// Authentication (authn.go) turns a gRPC call's bearer token, JWT or client
// certificate into a Principal; the decisions (decide.go) answer, for one
// principal, whether it may emit into a tenant, which NATS subject filters a
// watch becomes, and which tenants a query is scoped to. The tenant model is
// flat: a grant on an organization says nothing about its projects.
//
// Watch decisions are made on subject algebra (subjalg.go) over the encoded
// 6-token event subjects of package subject, so that no combination of
// wildcards and encoded names reaches beyond a grant.
package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// Verb is what a principal does with a tenant's events.
type Verb string

// Verbs.
const (
	VerbEmit      Verb = "emit"
	VerbWatch     Verb = "watch"
	VerbQuery     Verb = "query" // Query and Get
	VerbAnalytics Verb = "analytics"
	// VerbAdmin is tenant administration (TenantService): it is about every
	// tenant, so only a grant on the global tenant, which only platform
	// principals hold, may carry it.
	VerbAdmin Verb = "admin"
	// VerbRules manages a tenant's rules (RulesService); a rule also needs
	// the watch verb on its tenant, since it sees what a watch would.
	VerbRules Verb = "rules"
)

// Verbs lists every verb.
var Verbs = []Verb{VerbEmit, VerbWatch, VerbQuery, VerbAnalytics, VerbAdmin, VerbRules}

func (v Verb) valid() bool { return slices.Contains(Verbs, v) }

// AnyName is the tenant name of a grant on every tenant of its type.
const AnyName = "*"

// Bounds on what one principal carries (a JWT's claims are caller input).
const (
	maxGrants = 256
	maxKinds  = 64
)

// Tenant names one tenant. Name is "" for the global tenant.
type Tenant struct {
	Type string `yaml:"type" json:"type"`
	Name string `yaml:"name" json:"name"`
}

func (t Tenant) String() string {
	if t.Type == event.TenantGlobal && t.Name == "" {
		return event.TenantGlobal
	}
	if !slices.Contains(event.TenantTypes, t.Type) {
		return fmt.Sprintf("%q/%q", t.Type, t.Name) // caller input: quoted
	}
	return fmt.Sprintf("%s/%q", t.Type, t.Name)
}

// GroupKind is an API group and kind; Group "" is the core group.
type GroupKind struct {
	Group string `yaml:"group" json:"group"`
	Kind  string `yaml:"kind" json:"kind"`
}

func (gk GroupKind) String() string {
	g := gk.Group
	if g == "" {
		g = "core"
	}
	return fmt.Sprintf("%q", g+"/"+gk.Kind)
}

// Grant allows verbs on the events of one tenant, or of every tenant of a
// type. Only platform principals may hold grants on the global tenant or on
// every tenant of a type.
type Grant struct {
	// TenantType is global, organization, project or user.
	TenantType string `yaml:"tenantType" json:"tenantType"`
	// TenantName is a tenant's name, AnyName for every tenant of the type, or
	// "" for the global tenant.
	TenantName string `yaml:"tenantName" json:"tenantName"`
	// Kinds, when not empty, restricts the grant to events regarding these
	// kinds.
	Kinds []GroupKind `yaml:"kinds" json:"kinds"`
	Verbs []Verb      `yaml:"verbs" json:"verbs"`
}

// wide reports whether g may only be held by a platform principal.
func (g Grant) wide() bool {
	return g.TenantType == event.TenantGlobal || g.TenantName == AnyName
}

func (g Grant) allows(v Verb) bool { return slices.Contains(g.Verbs, v) }

// coversTenant reports whether g covers the tenant t (t.Name AnyName: every
// tenant of the type).
func (g Grant) coversTenant(t Tenant) bool {
	if g.TenantType != t.Type {
		return false
	}
	if g.TenantType == event.TenantGlobal {
		return t.Name == "" || t.Name == AnyName // there is one global tenant
	}
	return g.TenantName == AnyName || g.TenantName == t.Name && t.Name != AnyName
}

func (g Grant) coversKind(group, kind string) bool {
	return len(g.Kinds) == 0 || slices.Contains(g.Kinds, GroupKind{group, kind})
}

func (g Grant) tenant() Tenant {
	if g.TenantType == event.TenantGlobal {
		return Tenant{Type: event.TenantGlobal}
	}
	return Tenant{Type: g.TenantType, Name: g.TenantName}
}

// normalize returns g in canonical form and checks it. platform says whether
// the holder is a platform principal.
func (g Grant) normalize(platform bool) (Grant, error) {
	if !slices.Contains(event.TenantTypes, g.TenantType) {
		return g, fmt.Errorf("tenantType must be one of %s, got %q", strings.Join(event.TenantTypes, ", "), g.TenantType)
	}
	if g.TenantType == event.TenantGlobal {
		switch g.TenantName {
		case "", "_", AnyName:
			g.TenantName = ""
		default:
			return g, fmt.Errorf("tenantName must be empty for the global tenant, got %q", g.TenantName)
		}
	} else if g.TenantName != AnyName {
		if vs := event.ValidateTenant(&eventgatev1.Tenant{Type: g.TenantType, Name: g.TenantName}); len(vs) > 0 {
			return g, fmt.Errorf("tenantName %s", vs[0].Description)
		}
	}
	if g.wide() && !platform {
		what := "every " + g.TenantType + " tenant"
		if g.TenantType == event.TenantGlobal {
			what = "the global tenant"
		}
		return g, fmt.Errorf("a grant on %s is only for platform principals", what)
	}
	if len(g.Verbs) == 0 {
		return g, errors.New("at least one verb is required")
	}
	verbs := make([]Verb, 0, len(g.Verbs))
	for _, v := range g.Verbs {
		if !v.valid() {
			return g, fmt.Errorf("unknown verb %q", v)
		}
		if v == VerbAdmin && (g.TenantType != event.TenantGlobal || len(g.Kinds) > 0) {
			return g, fmt.Errorf("verb %q is only for a grant on the global tenant without kinds", v)
		}
		if !slices.Contains(verbs, v) {
			verbs = append(verbs, v)
		}
	}
	g.Verbs = verbs
	if len(g.Kinds) > maxKinds {
		return g, fmt.Errorf("at most %d kinds per grant", maxKinds)
	}
	kinds := make([]GroupKind, 0, len(g.Kinds))
	for _, k := range g.Kinds {
		if k.Kind == "" {
			return g, errors.New("kinds: kind is required")
		}
		if k.Group == "core" { // as the watch API spells the core group
			k.Group = ""
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	g.Kinds = kinds
	if len(kinds) == 0 {
		g.Kinds = nil
	}
	return g, nil
}

// Principal is an authenticated caller and what it may do. A Principal is
// shared between requests and must not be modified once built.
type Principal struct {
	Name string
	// Platform principals may hold grants on the global tenant and on every
	// tenant of a type.
	Platform bool
	// Admin is the implicit local administrator when no authentication is
	// configured: it may do everything.
	Admin  bool
	Grants []Grant
	// DefaultTenant is where Emit puts events whose request names no tenant.
	DefaultTenant *Tenant

	rec *recorder // denials are counted and logged here; nil in tests
}

// validate normalizes the grants and checks the platform rule and the default
// tenant.
func (p *Principal) validate() error {
	if p.Name == "" {
		return errors.New("principal name is required")
	}
	if p.Name == AdminName && !p.Admin {
		return fmt.Errorf("principal name %q is reserved", AdminName)
	}
	if len(p.Grants) > maxGrants {
		return fmt.Errorf("principal %q: at most %d grants", p.Name, maxGrants)
	}
	for i, g := range p.Grants {
		ng, err := g.normalize(p.Platform)
		if err != nil {
			return fmt.Errorf("principal %q: grants[%d]: %w", p.Name, i, err)
		}
		p.Grants[i] = ng
	}
	if t := p.DefaultTenant; t != nil {
		if t.Type == event.TenantGlobal && t.Name == "_" {
			t.Name = ""
		}
		if !p.allowsTenant(VerbEmit, *t) || t.Name == AnyName {
			return fmt.Errorf("principal %q: defaultTenant %s is not a tenant it may emit into", p.Name, t)
		}
	}
	return nil
}

// grants returns the grants of p that allow v. Grants a non-platform
// principal may not hold are ignored even if a Principal was built by hand.
func (p *Principal) grants(v Verb) []Grant {
	var gs []Grant
	for _, g := range p.Grants {
		if g.allows(v) && (p.Platform || !g.wide()) {
			gs = append(gs, g)
		}
	}
	return gs
}

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal in ctx.
func FromContext(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(*Principal)
	return p, ok && p != nil
}

var (
	// ErrUnauthenticated: the caller presented no valid credentials.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the caller may not do what it asked.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrNoDefaultTenant: an Emit named no tenant and the caller has no
	// default one (the service answers InvalidArgument on "tenant").
	ErrNoDefaultTenant = errors.New("tenant is required")
	// ErrOverlappingGrants: a watch naming no tenant or kind would need
	// subject filters that overlap, because the caller holds a grant on every
	// tenant of a type for some kinds and a grant on one tenant of that type
	// for all kinds; no set of disjoint NATS filters expresses that union.
	// The caller must name a tenant or a kind (FailedPrecondition).
	ErrOverlappingGrants = errors.New("grants overlap")
)

// Denial reasons, the "reason" label of the denial counter.
const (
	ReasonUnauthenticated = "unauthenticated"
	ReasonTenant          = "tenant"
	ReasonKind            = "kind"
	ReasonNoGrant         = "no_grant"
	ReasonReserved        = "reserved_name"
)

// DeniedError is a decision that refused a request. It wraps
// ErrPermissionDenied; its message names what is not allowed.
type DeniedError struct {
	Verb   Verb
	Reason string
	What   string // e.g. `watch of tenant project/"shop"`
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("permission denied: %s is not allowed", e.What)
}

// Unwrap makes errors.Is(err, ErrPermissionDenied) hold.
func (e *DeniedError) Unwrap() error { return ErrPermissionDenied }

// deny builds a DeniedError, counts and logs it.
func (p *Principal) deny(v Verb, reason, format string, args ...any) error {
	err := &DeniedError{Verb: v, Reason: reason, What: fmt.Sprintf(format, args...)}
	p.rec.denied(p.Name, v, reason, err.What)
	return err
}
