// Package openapi serves the Kubernetes OpenAPI documents of the events the
// gateway's Kubernetes API serves: /openapi/v2 and /openapi/v3 (with
// /openapi/v3/api/v1 and /openapi/v3/apis/events.k8s.io/v1), so that
// kubectl validates what it creates and applies and kubectl explain works.
//
// The schemas are not written by hand: zz_generated.openapi.go is
// kube-openapi's openapi-gen output for the Kubernetes API types (make
// generate-k8s-openapi), and kube-openapi's builders keep only the
// definitions the events reach. kube-openapi's handlers serve them, with
// ETags, the protobuf forms kubectl asks for and the v3 discovery document.
package openapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/emicklei/go-restful/v3"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

//go:generate sh -c "cd ../.. && make generate-k8s-openapi"

// gvk is the x-kubernetes-group-version-kind of a definition: what kubectl
// finds a kind's schema by.
type gvk struct {
	Group, Version, Kind string
}

// kinds are the served kinds, by model name.
var kinds = map[string]gvk{
	eventsv1.Event{}.OpenAPIModelName():     {"events.k8s.io", "v1", "Event"},
	eventsv1.EventList{}.OpenAPIModelName(): {"events.k8s.io", "v1", "EventList"},
	corev1.Event{}.OpenAPIModelName():       {"", "v1", "Event"},
	corev1.EventList{}.OpenAPIModelName():   {"", "v1", "EventList"},
	metav1.Status{}.OpenAPIModelName():      {"", "v1", "Status"},
}

// groupVersion is one served API group version.
type groupVersion struct {
	path       string // under /openapi/v3/ and the server root
	group      string
	event      any // its Event type, a sample for the routes
	eventList  any
	deleteNote string
}

var groupVersions = []groupVersion{
	{path: "apis/events.k8s.io/v1", group: "events.k8s.io", event: eventsv1.Event{}, eventList: eventsv1.EventList{}},
	{path: "api/v1", group: "", event: corev1.Event{}, eventList: corev1.EventList{}},
}

// webService describes gv's routes as the Kubernetes API server does, with
// each operation's group-version-kind: kubectl explain finds a resource's
// schema through them. The routes are descriptions only: package k8sapi
// serves them.
func (gv groupVersion) webService() *restful.WebService {
	ws := new(restful.WebService).Path("/"+gv.path).Produces("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
	kind := map[string]string{"group": gv.group, "version": "v1", "kind": "Event"}
	suffix := "V1"
	if gv.group == "" {
		suffix = "CoreV1"
	}
	noop := func(*restful.Request, *restful.Response) {}
	ns := ws.PathParameter("namespace", "object name and auth scope, such as for teams and projects").DataType("string")
	name := ws.PathParameter("name", "name of the Event").DataType("string")
	list := func(rb *restful.RouteBuilder) *restful.RouteBuilder {
		for _, q := range []string{"fieldSelector", "labelSelector", "continue", "resourceVersion", "allowWatchBookmarks"} {
			rb = rb.Param(ws.QueryParameter(q, q).DataType("string"))
		}
		return rb.Param(ws.QueryParameter("limit", "limit").DataType("integer")).Param(ws.QueryParameter("watch", "watch").DataType("boolean"))
	}
	route := func(rb *restful.RouteBuilder, op, action string, sample any) {
		ws.Route(rb.To(noop).Operation(op+suffix+"Event").Doc(action+" Event").
			Metadata("x-kubernetes-group-version-kind", kind).Metadata("x-kubernetes-action", action).
			Returns(http.StatusOK, "OK", sample))
	}
	ws.Route(list(ws.GET("/events")).To(noop).Operation("list"+suffix+"EventForAllNamespaces").Doc("list Event").
		Metadata("x-kubernetes-group-version-kind", kind).Metadata("x-kubernetes-action", "list").Returns(http.StatusOK, "OK", gv.eventList))
	route(list(ws.GET("/namespaces/{namespace}/events").Param(ns)), "listNamespaced", "list", gv.eventList)
	route(ws.POST("/namespaces/{namespace}/events").Param(ns).Reads(gv.event), "createNamespaced", "post", gv.event)
	route(ws.GET("/namespaces/{namespace}/events/{name}").Param(ns).Param(name), "readNamespaced", "get", gv.event)
	route(ws.PUT("/namespaces/{namespace}/events/{name}").Param(ns).Param(name).Reads(gv.event), "replaceNamespaced", "put", gv.event)
	route(ws.PATCH("/namespaces/{namespace}/events/{name}").Param(ns).Param(name).Reads(metav1.Patch{}).
		Consumes("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"),
		"patchNamespaced", "patch", gv.event)
	return ws
}

func definitionName(name string) (string, spec.Extensions) {
	k, ok := kinds[name]
	if !ok {
		return name, nil
	}
	return name, spec.Extensions{"x-kubernetes-group-version-kind": []any{
		map[string]any{"group": k.Group, "version": k.Version, "kind": k.Kind},
	}}
}

// Handler serves the OpenAPI documents at /openapi/v2 and /openapi/v3...
type Handler struct {
	mux *http.ServeMux
}

// New builds the documents; version is the Kubernetes version the gateway
// reports.
func New(version string) (*Handler, error) {
	info := &spec.Info{InfoProps: spec.InfoProps{Title: "eventgate Kubernetes Events API", Version: version}}
	var wss []*restful.WebService
	for _, gv := range groupVersions {
		wss = append(wss, gv.webService())
	}
	v2, err := builder.BuildOpenAPISpec(wss, &common.Config{
		Info:              info,
		GetDefinitions:    GetOpenAPIDefinitions,
		GetDefinitionName: definitionName,
	})
	if err != nil {
		return nil, fmt.Errorf("openapi v2: %w", err)
	}
	mux := http.NewServeMux()
	handler.NewOpenAPIService(v2).RegisterOpenAPIVersionedService("/openapi/v2", mux)

	v3 := handler3.NewOpenAPIService()
	for i, gv := range groupVersions {
		doc, err := builder3.BuildOpenAPISpec(wss[i:i+1], &common.OpenAPIV3Config{
			Info:              info,
			GetDefinitions:    GetOpenAPIDefinitions,
			GetDefinitionName: definitionName,
		})
		if err != nil {
			return nil, fmt.Errorf("openapi v3 %s: %w", gv.path, err)
		}
		v3.UpdateGroupVersion(gv.path, doc)
	}
	if err := v3.RegisterOpenAPIV3VersionedService("/openapi/v3", prefixMux{mux}); err != nil {
		return nil, fmt.Errorf("openapi v3: %w", err)
	}
	return &Handler{mux: mux}, nil
}

// prefixMux is the PathHandlerByGroupVersion of a ServeMux.
type prefixMux struct{ *http.ServeMux }

func (m prefixMux) HandlePrefix(path string, h http.Handler) { m.Handle(path, h) }

// Serves reports whether path is one of the OpenAPI documents' paths.
func Serves(path string) bool {
	return path == "/openapi/v2" || path == "/openapi/v3" || strings.HasPrefix(path, "/openapi/v3/")
}

// ServeHTTP serves the documents; r.URL.Path is the path under the server
// (a tenant prefix already removed).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the OpenAPI documents are read-only", http.StatusMethodNotAllowed)
		return
	}
	h.mux.ServeHTTP(w, r)
}
