package authz

import (
	"errors"
	"strings"
	"testing"
)

// TestAuthorizeAdmin: tenant administration needs the admin verb on the
// global tenant (which only a platform principal may hold), or the local
// administrator; a platform principal with every other verb is refused.
func TestAuthorizeAdmin(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *Principal
		ok   bool
	}{
		{"local administrator", &Principal{Name: AdminName, Admin: true, Platform: true}, true},
		{"admin on global", mustPrincipal(t, &Principal{Name: "ops", Platform: true, Grants: []Grant{{TenantType: "global", Verbs: []Verb{VerbAdmin}}}}), true},
		{"platform without admin", mustPrincipal(t, &Principal{Name: "platform", Platform: true, Grants: []Grant{
			{TenantType: "global", Verbs: []Verb{VerbEmit, VerbWatch, VerbQuery, VerbAnalytics}},
			{TenantType: "project", TenantName: AnyName, Verbs: []Verb{VerbEmit, VerbQuery}},
		}}), false},
		{"tenant principal", mustPrincipal(t, &Principal{Name: "shop", Grants: []Grant{{TenantType: "project", TenantName: "shop", Verbs: []Verb{VerbEmit}}}}), false},
		// Built by hand, past validation: a non-platform principal's global
		// grant is ignored.
		{"non-platform global grant", &Principal{Name: "sneaky", Grants: []Grant{{TenantType: "global", Verbs: []Verb{VerbAdmin}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.AuthorizeAdmin()
			if tc.ok != (err == nil) {
				t.Fatalf("AuthorizeAdmin: %v, want allowed %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrPermissionDenied) {
				t.Fatalf("refusal %v is not a permission denial", err)
			}
		})
	}
}

// TestAdminVerbOnlyGlobal: the admin verb is refused on any grant but one on
// the global tenant without kinds.
func TestAdminVerbOnlyGlobal(t *testing.T) {
	for _, g := range []Grant{
		{TenantType: "project", TenantName: "shop", Verbs: []Verb{VerbAdmin}},
		{TenantType: "project", TenantName: AnyName, Verbs: []Verb{VerbAdmin}},
		{TenantType: "global", Kinds: []GroupKind{{"", "Pod"}}, Verbs: []Verb{VerbAdmin}},
	} {
		p := &Principal{Name: "p", Platform: true, Grants: []Grant{g}}
		if err := p.validate(); err == nil || !strings.Contains(err.Error(), `verb "admin"`) {
			t.Errorf("grant %+v: %v, want the admin verb refused", g, err)
		}
	}
}
