package k8sapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eventgate/eventgate/internal/authz"
)

// selfSubjectReviewPath is where kubectl auth whoami asks who it is.
const selfSubjectReviewPath = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

// Extra keys of a SelfSubjectReview's userInfo: eventgate's grants and
// default tenant, which Kubernetes' user info has no field for.
const (
	ExtraGrants        = "eventgate.io/grants"
	ExtraDefaultTenant = "eventgate.io/default-tenant"
)

// serveSelfSubjectReview answers kubectl auth whoami (and eventgate
// whoami): the caller's principal, its groups and, in extra, its grants.
func (a *API) serveSelfSubjectReview(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeStatus(w, methodNotAllowed("selfsubjectreviews take only create (POST)"))
		return
	}
	ctx := r.Context()
	if h := r.Header.Values("Authorization"); len(h) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.MD{"authorization": h})
	}
	p, err := a.auth.Authenticate(ctx)
	if err != nil {
		writeStatus(w, unauthorized(err.Error()))
		return
	}
	writeJSON(w, http.StatusCreated, "", &authnv1.SelfSubjectReview{
		TypeMeta: metav1.TypeMeta{Kind: "SelfSubjectReview", APIVersion: "authentication.k8s.io/v1"},
		Status:   authnv1.SelfSubjectReviewStatus{UserInfo: UserInfo(p)},
	})
}

// UserInfo describes a principal as Kubernetes user info.
func UserInfo(p *authz.Principal) authnv1.UserInfo {
	u := authnv1.UserInfo{Username: p.Name, Groups: []string{"system:authenticated"}, Extra: map[string]authnv1.ExtraValue{}}
	if p.Admin {
		u.Groups = append(u.Groups, "eventgate:admin")
	}
	if p.Platform {
		u.Groups = append(u.Groups, "eventgate:platform")
	}
	if t := p.DefaultTenant; t != nil {
		u.Extra[ExtraDefaultTenant] = authnv1.ExtraValue{tenantString(t.Type, t.Name)}
	}
	for _, g := range p.Grants {
		s := tenantString(g.TenantType, g.TenantName)
		if len(g.Kinds) > 0 {
			var kinds []string
			for _, k := range g.Kinds {
				kinds = append(kinds, strings.TrimPrefix(k.Group+"/"+k.Kind, "/"))
			}
			s += " (" + strings.Join(kinds, ", ") + ")"
		}
		var verbs []string
		for _, v := range g.Verbs {
			verbs = append(verbs, string(v))
		}
		slices.Sort(verbs)
		u.Extra[ExtraGrants] = append(u.Extra[ExtraGrants], fmt.Sprintf("%s: %s", s, strings.Join(verbs, ", ")))
	}
	if p.Admin {
		u.Extra[ExtraGrants] = append(u.Extra[ExtraGrants], "every tenant: every verb (local administrator: no authentication configured)")
	}
	if len(u.Extra) == 0 {
		u.Extra = nil
	}
	return u
}

func tenantString(typ, name string) string {
	if name == "" {
		return typ
	}
	return typ + "/" + name
}
