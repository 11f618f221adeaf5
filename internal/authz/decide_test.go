package authz

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/eventgate/eventgate/internal/subject"
)

// Names that are data but look like syntax.
const (
	sqlName  = `x' OR '1'='1`
	likeName = `%_\`
)

func mustPrincipal(t *testing.T, p *Principal) *Principal {
	t.Helper()
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func principals(t *testing.T) map[string]*Principal {
	all := []Verb{VerbEmit, VerbWatch, VerbQuery, VerbAnalytics}
	return map[string]*Principal{
		"shop": mustPrincipal(t, &Principal{Name: "shop", Grants: []Grant{
			{TenantType: "project", TenantName: "shop", Verbs: all},
		}}),
		// An organization principal: the model is flat, so nothing of the
		// organization's projects.
		"acme-org": mustPrincipal(t, &Principal{Name: "acme-org", Grants: []Grant{
			{TenantType: "organization", TenantName: "acme", Verbs: all},
		}}),
		"deployer": mustPrincipal(t, &Principal{Name: "deployer", Grants: []Grant{
			{TenantType: "project", TenantName: "blog", Kinds: []GroupKind{{"apps", "Deployment"}}, Verbs: []Verb{VerbEmit, VerbWatch}},
			{TenantType: "project", TenantName: "blog", Verbs: []Verb{VerbQuery}},
		}}),
		"two": mustPrincipal(t, &Principal{Name: "two", Grants: []Grant{
			{TenantType: "project", TenantName: "a", Verbs: []Verb{VerbWatch, VerbQuery}},
			{TenantType: "user", TenantName: "alice", Kinds: []GroupKind{{"", "Pod"}, {"core", "Secret"}}, Verbs: []Verb{VerbWatch, VerbQuery}},
		}}),
		// Names made of SQL and subject metacharacters are plain names.
		"weird": mustPrincipal(t, &Principal{Name: "weird", Grants: []Grant{
			{TenantType: "project", TenantName: sqlName, Verbs: all},
			{TenantType: "project", TenantName: "a.b", Verbs: all},
			{TenantType: "project", TenantName: likeName, Verbs: all},
			{TenantType: "project", TenantName: "~2A", Verbs: all},
		}}),
		"platform": mustPrincipal(t, &Principal{Name: "platform", Platform: true, Grants: []Grant{
			{TenantType: "project", TenantName: "*", Verbs: []Verb{VerbWatch, VerbQuery}},
			{TenantType: "global", Verbs: all},
		}}),
		"admin": {Name: AdminName, Admin: true, Platform: true},
	}
}

func TestAuthorizeEmit(t *testing.T) {
	ps := principals(t)
	tests := []struct {
		principal string
		tenant    Tenant
		group     string
		kind      string
		want      string // "" allowed, else a substring of the denial
	}{
		{"shop", Tenant{"project", "shop"}, "apps", "Deployment", ""},
		{"shop", Tenant{"project", "blog"}, "", "Pod", `emit into tenant project/"blog"`},
		{"shop", Tenant{"organization", "shop"}, "", "Pod", `tenant organization/"shop"`},
		{"shop", Tenant{"global", ""}, "", "Node", "emit into tenant global"},
		{"shop", Tenant{"project", "*"}, "", "Pod", `project/"*"`},
		{"shop", Tenant{"project", "shop.x"}, "", "Pod", `project/"shop.x"`},
		{"shop", Tenant{"project", "Shop"}, "", "Pod", `project/"Shop"`},
		{"acme-org", Tenant{"organization", "acme"}, "", "Pod", ""},
		{"acme-org", Tenant{"project", "acme"}, "", "Pod", `project/"acme"`},
		{"deployer", Tenant{"project", "blog"}, "apps", "Deployment", ""},
		{"deployer", Tenant{"project", "blog"}, "apps", "ReplicaSet", `emit of kind "apps/ReplicaSet" into tenant project/"blog"`},
		{"deployer", Tenant{"project", "blog"}, "", "Deployment", `kind "core/Deployment"`},
		{"weird", Tenant{"project", sqlName}, "", "Pod", ""},
		{"weird", Tenant{"project", "x"}, "", "Pod", `project/"x"`},
		{"weird", Tenant{"project", "*"}, "", "Pod", `project/"*"`},
		{"weird", Tenant{"project", "a_b"}, "", "Pod", `project/"a_b"`},
		{"weird", Tenant{"project", "%"}, "", "Pod", `project/"%"`},
		{"platform", Tenant{"global", ""}, "", "Node", ""},
		{"platform", Tenant{"global", "_"}, "", "Node", ""},
		{"platform", Tenant{"project", "shop"}, "", "Pod", `emit into tenant project/"shop"`}, // watch and query only
		{"admin", Tenant{"user", "anyone"}, "x", "Y", ""},
	}
	for _, tt := range tests {
		err := ps[tt.principal].AuthorizeEmit(tt.tenant, tt.group, tt.kind)
		checkDecision(t, tt.principal+" emit "+tt.tenant.String(), err, tt.want)
	}
}

func checkDecision(t *testing.T, name string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v, want allowed", name, err)
	case want != "" && err == nil:
		t.Errorf("%s: allowed, want denied (%s)", name, want)
	case want != "" && (!errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: %v, want PermissionDenied naming %s", name, err, want)
	}
}

func TestDefaultEmitTenant(t *testing.T) {
	ps := principals(t)
	tests := []struct {
		principal string
		want      Tenant
		err       error
	}{
		{"shop", Tenant{"project", "shop"}, nil},
		{"deployer", Tenant{"project", "blog"}, nil},
		{"two", Tenant{}, ErrNoDefaultTenant}, // no emit grant
		{"platform", Tenant{"global", ""}, nil},
		{"admin", Tenant{"global", ""}, nil},
	}
	for _, tt := range tests {
		got, err := ps[tt.principal].DefaultEmitTenant()
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("%s: %v, %v; want %v, %v", tt.principal, got, err, tt.want, tt.err)
		}
	}
	two := mustPrincipal(t, &Principal{Name: "two-emit", Grants: []Grant{
		{TenantType: "project", TenantName: "a", Verbs: []Verb{VerbEmit}},
		{TenantType: "project", TenantName: "b", Verbs: []Verb{VerbEmit}},
	}, DefaultTenant: &Tenant{"project", "b"}})
	if got, err := two.DefaultEmitTenant(); err != nil || got != (Tenant{"project", "b"}) {
		t.Errorf("explicit default: %v, %v", got, err)
	}
	two.DefaultTenant = nil
	if _, err := two.DefaultEmitTenant(); !errors.Is(err, ErrNoDefaultTenant) {
		t.Errorf("two tenants, no default: %v", err)
	}
}

func TestScope(t *testing.T) {
	ps := principals(t)
	tests := []struct {
		principal string
		verb      Verb
		narrow    *Tenant
		want      Scope
		deny      string
	}{
		{"shop", VerbQuery, nil, Scope{Tenants: []ScopeTenant{{Type: "project", Name: "shop"}}}, ""},
		{"shop", VerbAnalytics, &Tenant{"project", "shop"}, Scope{Tenants: []ScopeTenant{{Type: "project", Name: "shop"}}}, ""},
		{"shop", VerbQuery, &Tenant{"project", "blog"}, Scope{}, `query of tenant project/"blog"`},
		{"shop", VerbQuery, &Tenant{"project", ""}, Scope{}, "query of every project tenant"},
		{"shop", VerbQuery, &Tenant{"project", "*"}, Scope{}, `tenant named "*" by name`},
		{"shop", VerbQuery, &Tenant{"project", sqlName}, Scope{}, `project/"x' OR '1'='1"`},
		{"shop", VerbQuery, &Tenant{"project", "shop%"}, Scope{}, `project/"shop%"`},
		{"shop", VerbQuery, &Tenant{"global", ""}, Scope{}, "query of tenant global"},
		{"shop", VerbQuery, &Tenant{"Project", "shop"}, Scope{}, `tenant type "Project"`},
		// Flat model: the organization sees nothing of its projects.
		{"acme-org", VerbQuery, &Tenant{"project", "acme"}, Scope{}, `project/"acme"`},
		{"acme-org", VerbQuery, &Tenant{"project", ""}, Scope{}, "every project tenant"},
		{"acme-org", VerbQuery, nil, Scope{Tenants: []ScopeTenant{{Type: "organization", Name: "acme"}}}, ""},
		{"deployer", VerbQuery, nil, Scope{Tenants: []ScopeTenant{{Type: "project", Name: "blog"}}}, ""},
		{"deployer", VerbAnalytics, nil, Scope{}, "analytics (principal"},
		{"two", VerbQuery, nil, Scope{Tenants: []ScopeTenant{
			{Type: "project", Name: "a"},
			{Type: "user", Name: "alice", Kinds: []GroupKind{{"", "Pod"}, {"", "Secret"}}},
		}}, ""},
		{"weird", VerbQuery, &Tenant{"project", sqlName}, Scope{Tenants: []ScopeTenant{{Type: "project", Name: sqlName}}}, ""},
		{"weird", VerbQuery, &Tenant{"project", "a_b"}, Scope{}, `project/"a_b"`},
		{"platform", VerbQuery, nil, Scope{Tenants: []ScopeTenant{{Type: "global"}, {Type: "project", Name: "*"}}}, ""},
		{"platform", VerbQuery, &Tenant{"project", "shop"}, Scope{Tenants: []ScopeTenant{{Type: "project", Name: "shop"}}}, ""},
		{"platform", VerbQuery, &Tenant{"project", ""}, Scope{Tenants: []ScopeTenant{{Type: "project", Name: "*"}}}, ""},
		{"platform", VerbQuery, &Tenant{"user", "u"}, Scope{}, `user/"u"`},
		{"platform", VerbAnalytics, nil, Scope{Tenants: []ScopeTenant{{Type: "global"}}}, ""},
		{"admin", VerbQuery, nil, Scope{All: true}, ""},
		{"admin", VerbQuery, &Tenant{"user", "u"}, Scope{Tenants: []ScopeTenant{{Type: "user", Name: "u"}}}, ""},
	}
	for _, tt := range tests {
		name := tt.principal + " " + string(tt.verb)
		if tt.narrow != nil {
			name += " " + tt.narrow.String()
		}
		got, err := ps[tt.principal].Scope(tt.verb, tt.narrow)
		checkDecision(t, name, err, tt.deny)
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); err == nil && diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

func TestScopeMerge(t *testing.T) {
	p := mustPrincipal(t, &Principal{Name: "p", Platform: true, Grants: []Grant{
		{TenantType: "project", TenantName: "*", Kinds: []GroupKind{{"", "Pod"}}, Verbs: []Verb{VerbQuery}},
		{TenantType: "project", TenantName: "a", Kinds: []GroupKind{{"", "Pod"}}, Verbs: []Verb{VerbQuery}}, // within *
		{TenantType: "project", TenantName: "b", Verbs: []Verb{VerbQuery}},
		{TenantType: "project", TenantName: "b", Kinds: []GroupKind{{"apps", "Deployment"}}, Verbs: []Verb{VerbQuery}},
	}})
	got, err := p.Scope(VerbQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Scope{Tenants: []ScopeTenant{
		{Type: "project", Name: "*", Kinds: []GroupKind{{"", "Pod"}}},
		{Type: "project", Name: "b"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !got.Matches(Tenant{"project", "zzz"}, "", "Pod") || got.Matches(Tenant{"project", "zzz"}, "apps", "Deployment") ||
		!got.Matches(Tenant{"project", "b"}, "x", "Y") || got.Matches(Tenant{"user", "b"}, "", "Pod") {
		t.Error("Matches")
	}
	// Wildcard grants on every type are everything.
	all := mustPrincipal(t, &Principal{Name: "all", Platform: true, Grants: []Grant{
		{TenantType: "global", Verbs: []Verb{VerbQuery}},
		{TenantType: "organization", TenantName: "*", Verbs: []Verb{VerbQuery}},
		{TenantType: "project", TenantName: "*", Verbs: []Verb{VerbQuery}},
		{TenantType: "user", TenantName: "*", Verbs: []Verb{VerbQuery}},
		{TenantType: "user", TenantName: "u", Verbs: []Verb{VerbQuery}},
	}})
	if got, err := all.Scope(VerbQuery, nil); err != nil || !got.All {
		t.Errorf("all: %+v, %v", got, err)
	}
}

func TestWatchSubjects(t *testing.T) {
	ps := principals(t)
	s := subject.Ptr
	tests := []struct {
		principal string
		f         subject.Filter
		want      []string
		deny      string
	}{
		// No tenant: everything the principal may see.
		{"shop", subject.Filter{}, []string{"events.project.shop.>"}, ""},
		{"shop", subject.Filter{Namespace: s("web")}, []string{"events.project.shop.*.web.>"}, ""},
		{"shop", subject.Filter{TenantType: s("project"), TenantName: s("shop"), Group: s("apps"), Kind: s("Deployment")},
			[]string{"events.project.shop.apps_Deployment.>"}, ""},
		{"shop", subject.Filter{TenantType: s("project"), TenantName: s("blog")}, nil, `watch of tenant project/"blog"`},
		{"shop", subject.Filter{TenantType: s("project")}, nil, `watch of every "project" tenant`},
		{"shop", subject.Filter{TenantName: s("shop")}, nil, `tenants named "shop" of every type`},
		{"shop", subject.Filter{TenantType: s("global")}, nil, "watch of tenant global"},
		// Wildcard-looking and metacharacter names are literals.
		{"shop", subject.Filter{TenantType: s("project"), TenantName: s("*")}, nil, `project/"*"`},
		{"shop", subject.Filter{TenantType: s("project"), TenantName: s(">")}, nil, `project/">"`},
		{"shop", subject.Filter{TenantType: s("*"), TenantName: s("shop")}, nil, `tenant "*"/"shop"`},
		{"shop", subject.Filter{TenantType: s("project"), TenantName: s("shop.>")}, nil, `project/"shop.>"`},
		{"shop", subject.Filter{TenantType: s("project"), TenantName: s("shop.x")}, nil, `project/"shop.x"`},
		{"shop", subject.Filter{TenantType: s("project"), TenantName: s("")}, nil, `project/""`},
		{"shop", subject.Filter{TenantType: s("project"), TenantName: s(sqlName)}, nil, `project/"x' OR '1'='1"`},
		{"shop", subject.Filter{Namespace: s(">")}, []string{"events.project.shop.*.~3E.>"}, ""},
		// Flat model: the organization sees nothing of its projects.
		{"acme-org", subject.Filter{TenantType: s("project"), TenantName: s("acme")}, nil, `project/"acme"`},
		{"acme-org", subject.Filter{TenantType: s("project")}, nil, `every "project" tenant`},
		{"acme-org", subject.Filter{}, []string{"events.organization.acme.>"}, ""},
		// Kind restrictions.
		{"deployer", subject.Filter{}, []string{"events.project.blog.apps_Deployment.>"}, ""},
		{"deployer", subject.Filter{TenantType: s("project"), TenantName: s("blog")}, []string{"events.project.blog.apps_Deployment.>"}, ""},
		{"deployer", subject.Filter{Group: s(""), Kind: s("Pod")}, nil, `watch of kind "core/Pod"`},
		{"deployer", subject.Filter{TenantType: s("project"), TenantName: s("blog"), Group: s(""), Kind: s("Pod")}, nil,
			`watch of kind "core/Pod" in tenant project/"blog"`},
		{"deployer", subject.Filter{Kind: s("Deployment")}, []string{"events.project.blog.apps_Deployment.>"}, ""},
		{"deployer", subject.Filter{Kind: s("Pod")}, nil, `kind "Pod" of any group`},
		{"deployer", subject.Filter{Group: s("batch")}, nil, `group "batch"`},
		{"two", subject.Filter{}, []string{"events.project.a.>", "events.user.alice.core_Pod.>", "events.user.alice.core_Secret.>"}, ""},
		{"two", subject.Filter{Kind: s("Pod")}, []string{"events.project.a.>", "events.user.alice.core_Pod.>"}, ""},
		{"two", subject.Filter{Group: s(""), Kind: s("Secret")}, []string{"events.project.a.core_Secret.>", "events.user.alice.core_Secret.>"}, ""},
		{"two", subject.Filter{Group: s("apps"), Kind: s("Deployment")}, []string{"events.project.a.apps_Deployment.>"}, ""},
		{"two", subject.Filter{TenantType: s("user")}, nil, `every "user" tenant`},
		{"weird", subject.Filter{TenantType: s("project"), TenantName: s("a.b")}, []string{"events.project.a_b.>"}, ""},
		{"weird", subject.Filter{TenantType: s("project"), TenantName: s("a_b")}, nil, `project/"a_b"`},
		{"weird", subject.Filter{TenantType: s("project"), TenantName: s("*")}, nil, `project/"*"`},
		{"weird", subject.Filter{TenantType: s("project"), TenantName: s("~2A")}, []string{"events.project.~7E2A.>"}, ""},
		{"weird", subject.Filter{TenantType: s("project"), TenantName: s(sqlName)}, []string{"events.project.x~27~20OR~20~271~27~3D~271.>"}, ""},
		{"platform", subject.Filter{}, []string{"events.global._.>", "events.project.>"}, ""},
		{"platform", subject.Filter{TenantType: s("project")}, []string{"events.project.>"}, ""},
		{"platform", subject.Filter{TenantType: s("project"), TenantName: s("*")}, []string{"events.project.~2A.>"}, ""},
		{"platform", subject.Filter{TenantType: s("global")}, []string{"events.global._.>"}, ""},
		{"platform", subject.Filter{TenantType: s("user")}, nil, `every "user" tenant`},
		{"admin", subject.Filter{TenantType: s("user")}, []string{"events.user.>"}, ""},
	}
	for _, tt := range tests {
		name := tt.principal + " " + tt.f.Subject()
		got, err := ps[tt.principal].WatchSubjects(tt.f)
		checkDecision(t, name, err, tt.deny)
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); err == nil && diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

func TestWatchSubjectsOverlap(t *testing.T) {
	p := mustPrincipal(t, &Principal{Name: "ops", Platform: true, Grants: []Grant{
		{TenantType: "project", TenantName: "*", Kinds: []GroupKind{{"", "Node"}}, Verbs: []Verb{VerbWatch}},
		{TenantType: "project", TenantName: "ops", Verbs: []Verb{VerbWatch}},
	}})
	if _, err := p.WatchSubjects(subject.Filter{}); !errors.Is(err, ErrOverlappingGrants) {
		t.Fatalf("got %v, want ErrOverlappingGrants", err)
	}
	// Naming a tenant or a kind resolves it.
	got, err := p.WatchSubjects(subject.Filter{Group: subject.Ptr(""), Kind: subject.Ptr("Node")})
	if err != nil || !cmp.Equal(got, []string{"events.project.*.core_Node.>"}) {
		t.Errorf("kind named: %v, %v", got, err)
	}
	got, err = p.WatchSubjects(subject.Filter{TenantType: subject.Ptr("project"), TenantName: subject.Ptr("ops")})
	if err != nil || !cmp.Equal(got, []string{"events.project.ops.>"}) {
		t.Errorf("tenant named: %v, %v", got, err)
	}
}

func TestHandBuiltWideGrantsIgnored(t *testing.T) {
	// Built without validation: a non-platform principal's wide grants
	// count for nothing.
	p := &Principal{Name: "sneaky", Grants: []Grant{
		{TenantType: "project", TenantName: "*", Verbs: Verbs},
		{TenantType: "global", Verbs: Verbs},
	}}
	if err := p.AuthorizeEmit(Tenant{"project", "x"}, "", "Pod"); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("emit: %v", err)
	}
	if _, err := p.WatchSubjects(subject.Filter{}); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("watch: %v", err)
	}
	if _, err := p.Scope(VerbQuery, nil); !errors.Is(err, ErrPermissionDenied) {
		t.Errorf("scope: %v", err)
	}
	if p.AllowsSubject(VerbWatch, "events.global._.core_Node._.n") {
		t.Error("AllowsSubject")
	}
	var nilP *Principal
	if _, err := nilP.WatchSubjects(subject.Filter{}); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("nil principal: %v", err)
	}
}

func TestAllowsSubject(t *testing.T) {
	ps := principals(t)
	tests := []struct {
		principal, subj string
		want            bool
	}{
		{"shop", subject.Key{TenantType: "project", TenantName: "shop", Kind: "Pod"}.Subject(), true},
		{"shop", subject.Key{TenantType: "project", TenantName: "shop.x", Kind: "Pod"}.Subject(), false},
		{"shop", "events.project.shop.>", false}, // a filter, not a subject
		{"shop", "events.project.*.core_Pod._.x", false},
		{"deployer", subject.Key{TenantType: "project", TenantName: "blog", Group: "apps", Kind: "Deployment"}.Subject(), true},
		{"deployer", subject.Key{TenantType: "project", TenantName: "blog", Kind: "Deployment"}.Subject(), false},
		{"platform", subject.Key{TenantType: "project", TenantName: "*", Kind: "Pod"}.Subject(), true},
		{"platform", subject.Key{TenantType: "global", Kind: "Node"}.Subject(), true},
		{"platform", subject.Key{TenantType: "global", TenantName: "x", Kind: "Node"}.Subject(), false},
	}
	for _, tt := range tests {
		if got := ps[tt.principal].AllowsSubject(VerbWatch, tt.subj); got != tt.want {
			t.Errorf("%s AllowsSubject(%q) = %v", tt.principal, tt.subj, got)
		}
	}
}
