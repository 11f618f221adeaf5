package authz

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/subject"
)

// canon returns t with the global tenant's placeholder name "_" as "".
func canon(t Tenant) Tenant {
	if t.Type == event.TenantGlobal && t.Name == subject.Empty {
		t.Name = ""
	}
	return t
}

// allowsTenant reports whether some grant lets p do v on tenant t, whatever
// the kind.
func (p *Principal) allowsTenant(v Verb, t Tenant) bool {
	if p.Admin {
		return true
	}
	t = canon(t)
	for _, g := range p.grants(v) {
		if g.coversTenant(t) {
			return true
		}
	}
	return false
}

// Allows reports whether p may do v on events of tenant t regarding an
// object of the given group ("" for core) and kind. It neither counts nor
// logs; it suits per-event checks in depth (e.g. a watch's in-process match).
func (p *Principal) Allows(v Verb, t Tenant, group, kind string) bool {
	if p == nil {
		return false
	}
	if p.Admin {
		return true
	}
	t = canon(t)
	for _, g := range p.grants(v) {
		if g.coversTenant(t) && g.coversKind(group, kind) {
			return true
		}
	}
	return false
}

// AuthorizeAdmin allows tenant administration (TenantService): to the local
// administrator, and to a principal with the admin verb on the global
// tenant.
func (p *Principal) AuthorizeAdmin() error {
	if p.allowsTenant(VerbAdmin, Tenant{Type: event.TenantGlobal}) {
		return nil
	}
	return p.deny(VerbAdmin, ReasonNoGrant, "tenant administration without the %q verb on the global tenant", VerbAdmin)
}

// AllowsSubject reports whether p may do v on the event stored under the
// event subject subj; false when subj is not an event subject.
func (p *Principal) AllowsSubject(v Verb, subj string) bool {
	k, err := subject.Parse(subj)
	if err != nil {
		return false
	}
	return p.Allows(v, Tenant{Type: k.TenantType, Name: k.TenantName}, k.Group, k.Kind)
}

// AuthorizeEmit decides whether p may emit an event regarding an object of
// group ("" for core) and kind into tenant t.
func (p *Principal) AuthorizeEmit(t Tenant, group, kind string) error {
	if p == nil {
		return ErrUnauthenticated
	}
	if p.Admin {
		return nil
	}
	t = canon(t)
	gs := p.grants(VerbEmit)
	if len(gs) == 0 {
		return p.deny(VerbEmit, ReasonNoGrant, "emit (principal %q holds no emit grant)", p.Name)
	}
	tenantOK := false
	for _, g := range gs {
		if g.coversTenant(t) {
			tenantOK = true
			if g.coversKind(group, kind) {
				return nil
			}
		}
	}
	if !tenantOK {
		return p.deny(VerbEmit, ReasonTenant, "emit into tenant %s", t)
	}
	return p.deny(VerbEmit, ReasonKind, "emit of kind %s into tenant %s", GroupKind{group, kind}, t)
}

// DefaultEmitTenant returns the tenant an Emit that names none goes to: the
// principal's DefaultTenant, else the tenant of its emit grants when they
// name exactly one tenant (the local administrator's is global). It returns
// an error wrapping ErrNoDefaultTenant otherwise.
func (p *Principal) DefaultEmitTenant() (Tenant, error) {
	if p == nil {
		return Tenant{}, ErrUnauthenticated
	}
	if p.DefaultTenant != nil {
		return canon(*p.DefaultTenant), nil
	}
	if p.Admin {
		return Tenant{Type: event.TenantGlobal}, nil
	}
	var ts []Tenant
	for _, g := range p.grants(VerbEmit) {
		if g.TenantName == AnyName && g.TenantType != event.TenantGlobal {
			return Tenant{}, fmt.Errorf("%w: principal %q may emit into several tenants; name one", ErrNoDefaultTenant, p.Name)
		}
		if t := g.tenant(); !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	if len(ts) != 1 {
		return Tenant{}, fmt.Errorf("%w: principal %q has no default tenant; name one", ErrNoDefaultTenant, p.Name)
	}
	return ts[0], nil
}

// Scope is the set of events a query may return: All, or the union of
// Tenants. The store ANDs it into every statement; the zero Scope allows
// nothing.
type Scope struct {
	All     bool
	Tenants []ScopeTenant
}

// ScopeTenant is one tenant, or every tenant of a type, optionally
// restricted to some kinds.
type ScopeTenant struct {
	Type string
	// Name is the tenant's name; AnyName ("*") is every tenant of Type. The
	// global tenant's name is "".
	Name string
	// Kinds, when not empty, restricts this entry to events regarding these
	// kinds (Group "" is the core group).
	Kinds []GroupKind
}

// AnyName reports whether t stands for every tenant of its type.
func (t ScopeTenant) AnyName() bool { return t.Name == AnyName }

// Matches reports whether the scope allows an event of tenant t regarding an
// object of group and kind. Stores may use it to check rows in depth.
func (s Scope) Matches(t Tenant, group, kind string) bool {
	if s.All {
		return true
	}
	t = canon(t)
	for _, st := range s.Tenants {
		if st.Type == t.Type && (st.Name == AnyName || st.Name == t.Name) &&
			(len(st.Kinds) == 0 || slices.Contains(st.Kinds, GroupKind{group, kind})) {
			return true
		}
	}
	return false
}

// Scope returns what p may read with v (VerbQuery for Query and Get,
// VerbAnalytics for aggregations). narrow is the tenant the request names:
// nil for every tenant p may read, a Name of "" (not global) for every
// tenant of the type p may read. A narrow tenant p may not read in full is
// refused, naming it. A Get should use the scope and answer NotFound for an
// event outside it, so that uids do not leak.
func (p *Principal) Scope(v Verb, narrow *Tenant) (Scope, error) {
	if p == nil {
		return Scope{}, ErrUnauthenticated
	}
	if !v.valid() {
		return Scope{}, p.deny(v, ReasonNoGrant, "verb %q", v)
	}
	var want Tenant
	if narrow != nil {
		want = canon(*narrow)
		if !slices.Contains(event.TenantTypes, want.Type) {
			return Scope{}, p.deny(v, ReasonTenant, "%s of tenant type %q", v, want.Type)
		}
		if want.Type == event.TenantGlobal && want.Name != "" {
			return Scope{}, p.deny(v, ReasonTenant, "%s of tenant %s/%q", v, want.Type, want.Name)
		}
		if want.Name == AnyName {
			// "*" is the wildcard of grants and scopes; as a requested name
			// it would be ambiguous.
			return Scope{}, p.deny(v, ReasonReserved, "%s of a tenant named %q by name", v, AnyName)
		}
		if want.Type != event.TenantGlobal && want.Name == "" {
			want.Name = AnyName
		}
	}
	if p.Admin {
		if narrow == nil {
			return Scope{All: true}, nil
		}
		return Scope{Tenants: []ScopeTenant{{Type: want.Type, Name: want.Name}}}, nil
	}
	gs := p.grants(v)
	if len(gs) == 0 {
		return Scope{}, p.deny(v, ReasonNoGrant, "%s (principal %q holds no %s grant)", v, p.Name, v)
	}
	var sts []ScopeTenant
	if narrow == nil {
		for _, g := range gs {
			t := g.tenant()
			sts = append(sts, ScopeTenant{Type: t.Type, Name: t.Name, Kinds: g.Kinds})
		}
		return mergeScope(sts, true), nil
	}
	covered := false
	for _, g := range gs {
		if g.coversTenant(want) {
			covered = true
		}
		if g.TenantType != want.Type {
			continue
		}
		switch {
		case want.Name == AnyName:
			t := g.tenant()
			sts = append(sts, ScopeTenant{Type: t.Type, Name: t.Name, Kinds: g.Kinds})
		case g.coversTenant(want):
			sts = append(sts, ScopeTenant{Type: want.Type, Name: want.Name, Kinds: g.Kinds})
		}
	}
	if !covered {
		if want.Name == AnyName {
			return Scope{}, p.deny(v, ReasonTenant, "%s of every %s tenant", v, want.Type)
		}
		return Scope{}, p.deny(v, ReasonTenant, "%s of tenant %s", v, want)
	}
	return mergeScope(sts, false), nil
}

// mergeScope merges entries of the same tenant and drops entries another
// contains. whole says the scope may become All.
func mergeScope(sts []ScopeTenant, whole bool) Scope {
	type key struct{ typ, name string }
	var keys []key
	kinds := map[key][]GroupKind{}
	all := map[key]bool{}
	for _, st := range sts {
		k := key{st.Type, st.Name}
		if _, seen := kinds[k]; !seen && !all[k] {
			keys = append(keys, k)
		}
		if len(st.Kinds) == 0 {
			all[k] = true
			delete(kinds, k)
			continue
		}
		if all[k] {
			continue
		}
		ks := kinds[k]
		for _, gk := range st.Kinds {
			if !slices.Contains(ks, gk) {
				ks = append(ks, gk)
			}
		}
		kinds[k] = ks
	}
	var out []ScopeTenant
	full := 0
	for _, k := range keys {
		wk := key{k.typ, AnyName}
		if k.typ == event.TenantGlobal {
			wk = key{k.typ, ""}
		}
		if k != wk && k.name != "" {
			// A named entry within the type's wildcard entry adds nothing.
			if all[wk] {
				continue
			}
			if wks, ok := kinds[wk]; ok && !all[k] && subsetKinds(kinds[k], wks) {
				continue
			}
		}
		if k == wk && all[k] {
			full++
		}
		st := ScopeTenant{Type: k.typ, Name: k.name}
		if !all[k] {
			st.Kinds = slices.Clone(kinds[k])
			slices.SortFunc(st.Kinds, func(a, b GroupKind) int {
				return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind))
			})
		}
		out = append(out, st)
	}
	if whole && full == len(event.TenantTypes) {
		return Scope{All: true}
	}
	slices.SortFunc(out, func(a, b ScopeTenant) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Name, b.Name))
	})
	return Scope{Tenants: out}
}

func subsetKinds(a, b []GroupKind) bool {
	for _, k := range a {
		if !slices.Contains(b, k) {
			return false
		}
	}
	return true
}

// WatchSubjects turns a watch filter into NATS filter subjects within p's
// watch grants: no two overlap, every event subject they match is matched by
// f and allowed by a grant, and every event subject matched by f and allowed
// by a grant is matched by one of them. Where f sets only one of Group and
// Kind, grants restricted to kinds are narrowed to the kinds f names, and
// the caller must still match the other half in process (as it does today).
//
// A filter that names a tenant (its type, its name or both) must name one p
// may watch in full; one that also names a group and kind must name one p
// may watch in that tenant; one that names a kind p may watch nowhere is
// refused. Everything f leaves open means "everything I may see", and
// expands to one subject per grant (intersected with f).
func (p *Principal) WatchSubjects(f subject.Filter) ([]string, error) {
	if p == nil {
		return nil, ErrUnauthenticated
	}
	if p.Admin {
		return []string{f.Subject()}, nil
	}
	fp, ok := parsePattern(f.Subject())
	if !ok {
		return nil, p.deny(VerbWatch, ReasonTenant, "watch of %q", f.Subject())
	}
	if f.TenantType != nil && *f.TenantType == event.TenantGlobal && f.TenantName == nil {
		fp[subject.PosTenantName] = subject.Empty // the one global tenant
	}
	gs := p.grants(VerbWatch)
	if len(gs) == 0 {
		return nil, p.deny(VerbWatch, ReasonNoGrant, "watch (principal %q holds no watch grant)", p.Name)
	}
	var tenants, kinds []pattern // grant patterns: tenant only, and with kinds
	for _, g := range gs {
		t := grantTenantPattern(g)
		tenants = append(tenants, t)
		if len(g.Kinds) == 0 {
			kinds = append(kinds, t)
			continue
		}
		for _, gk := range g.Kinds {
			if f.Group != nil && f.Kind == nil && gk.Group != *f.Group ||
				f.Kind != nil && f.Group == nil && gk.Kind != *f.Kind {
				continue
			}
			k := t
			k[subject.PosGroupKind] = subject.EncodeGroupKind(gk.Group, gk.Kind)
			kinds = append(kinds, k)
		}
	}

	tenantNamed := f.TenantType != nil || f.TenantName != nil
	if tenantNamed {
		tp := fp
		tp[subject.PosGroupKind], tp[subject.PosNamespace], tp[subject.PosReserved] = pwc, pwc, pwc
		if !slices.ContainsFunc(tenants, tp.subset) {
			return nil, p.deny(VerbWatch, ReasonTenant, "watch of %s", describeTenant(f))
		}
		if f.Group != nil && f.Kind != nil {
			kp := tp
			kp[subject.PosGroupKind] = fp[subject.PosGroupKind]
			if !slices.ContainsFunc(kinds, kp.subset) {
				return nil, p.deny(VerbWatch, ReasonKind, "watch of kind %s in %s", GroupKind{*f.Group, *f.Kind}, describeTenant(f))
			}
		}
	}
	var out []pattern
	for _, k := range kinds {
		if r, ok := fp.intersect(k); ok {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		if f.Group != nil || f.Kind != nil {
			where := ""
			if tenantNamed {
				where = " in " + describeTenant(f)
			}
			return nil, p.deny(VerbWatch, ReasonKind, "watch of %s%s", describeKind(f), where)
		}
		return nil, p.deny(VerbWatch, ReasonTenant, "watch of %q", f.Subject())
	}
	out, ok = disjoint(out)
	if !ok {
		return nil, fmt.Errorf("%w: the watch grants of principal %q overlap without one containing the other; name a tenant or a kind", ErrOverlappingGrants, p.Name)
	}
	subjs := make([]string, len(out))
	for i, o := range out {
		subjs[i] = o.String()
	}
	return subjs, nil
}

// grantTenantPattern is events.<type>.<name>.*.*.* for g.
func grantTenantPattern(g Grant) pattern {
	name := pwc
	switch {
	case g.TenantType == event.TenantGlobal:
		name = subject.Empty
	case g.TenantName != AnyName:
		name = subject.EncodeToken(g.TenantName)
	}
	return pattern{subject.Prefix, subject.EncodeToken(g.TenantType), name, pwc, pwc, pwc}
}

func describeTenant(f subject.Filter) string {
	switch {
	case f.TenantType != nil && f.TenantName != nil:
		return "tenant " + Tenant{Type: *f.TenantType, Name: *f.TenantName}.String()
	case f.TenantType != nil && *f.TenantType == event.TenantGlobal:
		return "tenant global"
	case f.TenantType != nil:
		return fmt.Sprintf("every %q tenant", *f.TenantType)
	default:
		return fmt.Sprintf("tenants named %q of every type", *f.TenantName)
	}
}

func describeKind(f subject.Filter) string {
	switch {
	case f.Group != nil && f.Kind != nil:
		return "kind " + GroupKind{*f.Group, *f.Kind}.String()
	case f.Kind != nil:
		return fmt.Sprintf("kind %q of any group", *f.Kind)
	case *f.Group == "":
		return "the core group"
	default:
		return fmt.Sprintf("group %q", *f.Group)
	}
}
