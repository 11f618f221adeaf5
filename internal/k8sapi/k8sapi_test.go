package k8sapi

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/selector"
)

func stored() *eventgatev1.Event {
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 123456000, time.UTC)
	return &eventgatev1.Event{
		Uid: "u1", Name: "api-0.1", Namespace: "web", ResourceVersion: "42",
		EventTime:           timestamppb.New(t0),
		Series:              &eventgatev1.EventSeries{Count: 3, LastObservedTime: timestamppb.New(t0.Add(time.Minute)), State: "Ongoing"},
		ReportingController: "example.com/ctl", ReportingInstance: "ctl-1", Action: "Sync", Reason: "BackOff",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "api-0", Uid: "p1", FieldPath: "spec.containers{app}"},
		Related:   &eventgatev1.ObjectReference{Kind: "Node", Name: "n1"},
		Note:      "back-off", Type: "Warning",
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"},
	}
}

func TestFieldSelectors(t *testing.T) {
	ev := stored()
	for _, tc := range []struct {
		gv    groupVersion
		sel   string
		match bool
		query string
		err   string
	}{
		{eventsV1, "reason=BackOff", true, "reason=BackOff", ""},
		{eventsV1, "reason==BackOff,type!=Normal", true, "reason=BackOff,type!=Normal", ""},
		{eventsV1, "regarding.name=api-0,regarding.fieldPath=spec.containers{app}", true, "regarding.fieldPath=spec.containers{app},regarding.name=api-0", ""},
		{eventsV1, "metadata.name=api-0.1", true, "", ""},
		{eventsV1, "metadata.name=other", false, "", ""},
		{eventsV1, "related.name=n1,action=Sync,reportingInstance=ctl-1", true, "action=Sync,related.name=n1,reportingInstance=ctl-1", ""},
		{eventsV1, "regarding.resourceVersion=1", false, "", ""},
		{eventsV1, "metadata.namespace=web", true, "namespace=web", ""},
		{eventsV1, "note=x", false, "", "field label not supported: note"},
		{eventsV1, "involvedObject.name=api-0", false, "", "field label not supported"},
		{coreV1, "involvedObject.name=api-0,source=example.com/ctl", true, "regarding.name=api-0,reportingController=example.com/ctl", ""},
		{coreV1, "reportingComponent!=example.com/ctl", false, "reportingController!=example.com/ctl", ""},
		{coreV1, "regarding.name=x", false, "", "field label not supported"},
		{coreV1, `reason=a\,b`, false, `reason=a\,b`, ""},
		{coreV1, "reason in (a)", false, "", "invalid field selector"},
	} {
		reqs, err := parseFieldSelector(tc.gv, tc.sel)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %q", tc.sel, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.sel, err)
			continue
		}
		if got := (filter{fields: reqs}).matches(ev); got != tc.match {
			t.Errorf("%q matches: %v", tc.sel, got)
		}
		if got := queryFieldSelector(reqs); got != tc.query {
			t.Errorf("%q pushed down as %q, want %q", tc.sel, got, tc.query)
		}
		if _, err := selector.Parse(queryFieldSelector(reqs)); err != nil {
			t.Errorf("%q: eventgate does not parse the pushed-down selector: %v", tc.sel, err)
		}
	}
}

// FuzzFieldSelector: whatever a caller sends, parsing does not panic and
// what is pushed down to Query parses there with the same values.
func FuzzFieldSelector(f *testing.F) {
	for _, s := range []string{"reason=a", `reason=a\,b,type!=c`, "involvedObject.name==x", "metadata.name=", `reason=\(\)\!`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, gv := range []groupVersion{coreV1, eventsV1} {
			reqs, err := parseFieldSelector(gv, s)
			if err != nil {
				continue
			}
			pushed, err := selector.Parse(queryFieldSelector(reqs))
			if err != nil {
				t.Fatalf("%q pushed down as %q: %v", s, queryFieldSelector(reqs), err)
			}
			i := 0
			for _, r := range reqs {
				if !pushable(r) {
					continue
				}
				if i >= len(pushed) || len(pushed[i].Values) != 1 || pushed[i].Values[0] != r.value {
					t.Fatalf("%q: requirement %d value %q not kept: %+v", s, i, r.value, pushed)
				}
				i++
			}
		}
	})
}

func TestContinueTokens(t *testing.T) {
	at := time.Unix(1700000000, 0)
	c, err := decodeContinue(encodeContinue("tok", "17", at))
	if err != nil || c.Token != "tok" || c.RV != "17" || c.Issued != at.Unix() {
		t.Fatalf("continue round trip: %+v %v", c, err)
	}
	for _, bad := range []string{"", "!!", "e30", strings.Repeat("A", 9000)} {
		if _, err := decodeContinue(bad); err == nil {
			t.Errorf("decodeContinue(%q) accepted", bad)
		}
	}
	// rebaseToken moves only the snapshot.
	in := `{"v":1,"rv":5,"t":123,"u":"x","h":"abc"}`
	out, ok := rebaseToken(b64(in), 99)
	if !ok || !strings.Contains(unb64(t, out), `"rv":99`) || !strings.Contains(unb64(t, out), `"u":"x"`) {
		t.Errorf("rebase: %v %s", ok, unb64(t, out))
	}
	if _, ok := rebaseToken(b64(`{"v":1}`), 1); ok {
		t.Error("rebased a token without rv")
	}
}

func TestTenantOf(t *testing.T) {
	proj := func(n string, verbs ...authz.Verb) authz.Grant {
		return authz.Grant{TenantType: "project", TenantName: n, Verbs: verbs}
	}
	for _, tc := range []struct {
		p    *authz.Principal
		want authz.Tenant
		err  string
	}{
		{&authz.Principal{Name: "a", Admin: true}, authz.Tenant{Type: "global"}, ""},
		{&authz.Principal{Name: "a", Grants: []authz.Grant{proj("shop", "emit"), proj("shop", "query")}}, authz.Tenant{Type: "project", Name: "shop"}, ""},
		{&authz.Principal{Name: "a", Grants: []authz.Grant{proj("shop", "query"), proj("blog", "query")}}, authz.Tenant{}, "grants on 2 tenants"},
		{&authz.Principal{Name: "a", Grants: []authz.Grant{proj("shop", "query"), proj("blog", "query")}, DefaultTenant: &authz.Tenant{Type: "project", Name: "blog"}}, authz.Tenant{Type: "project", Name: "blog"}, ""},
		{&authz.Principal{Name: "a", Grants: []authz.Grant{proj("*", "query")}}, authz.Tenant{}, "every project tenant"},
		{&authz.Principal{Name: "a"}, authz.Tenant{}, "no grant"},
	} {
		got, err := tenantOf(tc.p)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %v, want %q", tc.p, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %v %v, want %v", tc.p, got, err, tc.want)
		}
	}
}

func TestParseResourcePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
		want request
	}{
		{"/api/v1/events", true, request{gv: coreV1}},
		{"/api/v1/namespaces/web/events", true, request{gv: coreV1, namespace: "web"}},
		{"/api/v1/namespaces/web/events/x.1", true, request{gv: coreV1, namespace: "web", name: "x.1"}},
		{"/apis/events.k8s.io/v1/namespaces/web/events/x", true, request{gv: eventsV1, namespace: "web", name: "x"}},
		{"/apis/events.k8s.io/v1/events", true, request{gv: eventsV1}},
		{"/apis/events.k8s.io/v1/events/x", false, request{}},
		{"/api/v1/namespaces/web/pods", false, request{}},
		{"/api/v1/namespaces//events", false, request{}},
		{"/api/v2/events", false, request{}},
		{"/apis/events.k8s.io/v1/namespaces/web/events/x/status", false, request{}},
	} {
		got, ok := parseResourcePath(strings.Split(strings.Trim(tc.path, "/"), "/"))
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: %+v %v, want %+v %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func unb64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
