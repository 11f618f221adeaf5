package k8sapi

import (
	"net"
	"net/http"
	"runtime"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// KubernetesVersion is the Kubernetes API version eventgate reports at
// /version: the version of the client libraries it is built with.
const KubernetesVersion = "v1.37.2"

// verbs are what the events resources support; delete is refused.
var verbs = metav1.Verbs{"create", "get", "list", "patch", "update", "watch"}

func eventsResource() metav1.APIResource {
	return metav1.APIResource{
		Name:         "events",
		SingularName: "event",
		Namespaced:   true,
		Kind:         "Event",
		Verbs:        verbs,
		ShortNames:   []string{"ev"},
	}
}

// serveDiscovery answers the discovery documents; false when the path is
// not one.
func (a *API) serveDiscovery(w http.ResponseWriter, r *http.Request, segs []string) bool {
	path := strings.Join(segs, "/")
	var body any
	switch path {
	case "api":
		body = &metav1.APIVersions{
			TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
			Versions: []string{"v1"},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
				{ClientCIDR: "0.0.0.0/0", ServerAddress: serverAddress(r)},
			},
		}
	case "apis":
		// Plain APIGroupList even when aggregated discovery is asked for:
		// clients fall back to it by the response's content type.
		body = &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{eventsGroup()}}
	case "apis/events.k8s.io":
		g := eventsGroup()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		body = &g
	case "api/v1":
		body = &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1", APIResources: []metav1.APIResource{eventsResource()}}
	case "apis/events.k8s.io/v1":
		body = &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: eventsV1.apiVersion, APIResources: []metav1.APIResource{eventsResource()}}
	default:
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatus(w, methodNotAllowed("discovery documents are read-only"))
		return true
	}
	writeJSON(w, http.StatusOK, "", body)
	return true
}

func eventsGroup() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: eventsV1.apiVersion, Version: "v1"}
	return metav1.APIGroup{Name: eventsV1.group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

func serverAddress(r *http.Request) string {
	if _, _, err := net.SplitHostPort(r.Host); err == nil {
		return r.Host
	}
	return r.Host + ":80"
}

func (a *API) serveVersion(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatus(w, methodNotAllowed("/version is read-only"))
		return
	}
	writeJSON(w, http.StatusOK, "", version.Info{
		Major:      "1",
		Minor:      "37",
		GitVersion: KubernetesVersion + "+eventgate",
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		GoVersion:  runtime.Version(),
		Compiler:   runtime.Compiler,
	})
}
