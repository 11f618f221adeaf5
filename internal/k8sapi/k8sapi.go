// Package k8sapi serves the Kubernetes Events API (events.k8s.io/v1 and
// core/v1 events) on the gateway's HTTP listener, so that kubectl,
// client-go informers and event recorders need only a server address and a
// token.
//
// It is a client of eventgate's own gRPC API over the gateway's in-process
// connection, exactly like the REST gateway: Emit for create, update and
// patch, Query for list, Get for get, StreamWatch for watch. The caller's
// Authorization header is forwarded, so authentication, authorization,
// series aggregation and storage behave as they do for gRPC callers.
//
// # Tenancy
//
// A Kubernetes namespace is an event namespace inside one tenant. The
// tenant comes from the server URL when it has the prefix
// /tenants/{type}/{name} (use "_" as the global tenant's name), otherwise
// from the caller's credentials: its defaultTenant, else the one tenant its
// grants name (the local administrator's is global). A caller whose grants
// name several tenants must use the prefix.
//
// # Semantics
//
//   - resourceVersion is eventgate's: the events stream sequence. A list
//     answers at the ingest position (every event up to it is stored) and a
//     watch from it continues with no gap and no duplicate.
//   - Events are immutable history: DELETE answers 405 MethodNotAllowed.
//   - Create, update and patch go through Emit. An event without a series is
//     an occurrence (the server may fold it into a series); an event with a
//     series (client-go's events recorder after the second occurrence, a
//     core/v1 event with count > 1) is stored as the client counted it.
//     Updates keep the event's uid and name.
//   - A created event's uid is derived from its tenant, namespace and name,
//     so a create that races ahead of ingest and a later update of the same
//     name address the same event.
//   - continue tokens expire after Config.ContinueTTL: the request is then
//     answered 410 Expired with a fresh token that goes on from the same
//     position at the current resourceVersion.
package k8sapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/openapi"
)

// Config tunes the Kubernetes API.
type Config struct {
	// ContinueTTL is how long a list's continue token stays valid.
	ContinueTTL time.Duration `yaml:"continueTTL"`
	// BookmarkInterval is how often a watch that allows bookmarks gets one.
	BookmarkInterval time.Duration `yaml:"bookmarkInterval"`
}

// DefaultConfig returns the defaults: continue tokens live 5 minutes (etcd's
// default compaction interval), bookmarks every minute.
func DefaultConfig() Config {
	return Config{ContinueTTL: 5 * time.Minute, BookmarkInterval: time.Minute}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.ContinueTTL < time.Second {
		return fmt.Errorf("k8s continue TTL must be at least 1s, got %s", c.ContinueTTL)
	}
	if c.BookmarkInterval < time.Second || c.BookmarkInterval > time.Hour {
		return fmt.Errorf("k8s bookmark interval must be between 1s and 1h, got %s", c.BookmarkInterval)
	}
	return nil
}

// Authenticator turns the credentials of a call into a principal; the
// Kubernetes API uses it only to pick the caller's tenant, every decision is
// made again by the gRPC service it calls.
type Authenticator interface {
	Authenticate(ctx context.Context) (*authz.Principal, error)
}

// Options are what Register needs.
type Options struct {
	// Conn is the gateway's in-process gRPC connection.
	Conn grpc.ClientConnInterface
	// Auth picks the tenant of a request that names none.
	Auth   Authenticator
	Config Config
	// Correlate, when set, replaces each event created through the core/v1
	// API before it is emitted (client-go's EventCorrelator grouping:
	// internal/correlator).
	Correlate func(ev *eventgatev1.Event, now time.Time) *eventgatev1.Event
	Log       *slog.Logger
}

// API serves the Kubernetes paths.
type API struct {
	cfg       Config
	client    eventgatev1.EventServiceClient
	auth      Authenticator
	correlate func(ev *eventgatev1.Event, now time.Time) *eventgatev1.Event
	log       *slog.Logger
	annot     *runtime.ServeMux // only for runtime.AnnotateContext
	recent    *recentWrites
	now       func() time.Time
	openapi   http.Handler // nil when its documents did not build
}

// Register serves the Kubernetes API on mux: /api, /apis, /version and the
// same under /tenants/{type}/{name}/.
func Register(mux *http.ServeMux, o Options) {
	a := &API{
		cfg:       o.Config,
		client:    eventgatev1.NewEventServiceClient(o.Conn),
		auth:      o.Auth,
		correlate: o.Correlate,
		log:       o.Log,
		annot:     runtime.NewServeMux(),
		recent:    newRecentWrites(4096, 10*time.Minute),
		now:       time.Now,
	}
	if oa, err := openapi.New(KubernetesVersion); err != nil {
		o.Log.Error("the Kubernetes OpenAPI documents did not build: kubectl needs --validate=false", "err", err)
	} else {
		a.openapi = oa
	}
	for _, p := range patterns {
		mux.Handle(p, a)
	}
}

// patterns are the ServeMux patterns Register serves: one ending in "/" is
// a subtree.
var patterns = []string{"/api", "/api/", "/apis", "/apis/", "/version", "/openapi/", "/tenants/"}

// Serves reports whether Register's routes take path.
func Serves(path string) bool {
	for _, p := range patterns {
		if path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// WriteBadRequest answers a request on the Kubernetes API's paths that
// cannot reach it with a 400 Status (what its clients read).
func WriteBadRequest(w http.ResponseWriter, msg string) { writeStatus(w, badRequest(msg)) }

// ServeHTTP routes a Kubernetes request.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	var tenant *eventgatev1.Tenant
	if rest, ok := strings.CutPrefix(path, "/tenants/"); ok {
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) < 3 {
			writeStatus(w, notFound("the server could not find the requested resource"))
			return
		}
		tenant = &eventgatev1.Tenant{Type: parts[0], Name: parts[1]}
		if tenant.Type == event.TenantGlobal && tenant.Name == "_" {
			tenant.Name = ""
		}
		if vs := event.ValidateTenant(tenant); len(vs) > 0 {
			writeStatus(w, badRequest(fmt.Sprintf("tenant in the URL: %s %s", vs[0].Field, vs[0].Description)))
			return
		}
		path = "/" + parts[2]
	}
	if openapi.Serves(path) && a.openapi != nil {
		r = r.Clone(r.Context())
		r.URL.Path, r.URL.RawPath = path, ""
		a.openapi.ServeHTTP(w, r)
		return
	}
	if path == selfSubjectReviewPath {
		a.serveSelfSubjectReview(w, r)
		return
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case path == "/version" || path == "/version/":
		a.serveVersion(w, r)
		return
	case segs[0] == "api" || segs[0] == "apis":
		if a.serveDiscovery(w, r, segs) {
			return
		}
	}
	rq, ok := parseResourcePath(segs)
	if !ok {
		writeStatus(w, notFound("the server could not find the requested resource"))
		return
	}
	rq.tenant = tenant
	sum := sha256.Sum256([]byte(strings.Join(r.Header.Values("Authorization"), "\n")))
	rq.cred = string(sum[:])
	a.serveResource(w, r, rq)
}

// request is a parsed resource request.
type request struct {
	gv        groupVersion
	namespace string // "" for the cluster-wide collection
	name      string // "" for the collection
	tenant    *eventgatev1.Tenant
	// cred identifies the caller's credentials (a hash of its
	// Authorization header): what this gateway wrote for one caller is
	// never read back for another.
	cred string
}

// parseResourcePath recognises the event collections and objects:
// /api/v1[/namespaces/{ns}]/events[/{name}] and the same under
// /apis/events.k8s.io/v1.
func parseResourcePath(segs []string) (request, bool) {
	var rq request
	switch {
	case len(segs) >= 2 && segs[0] == "api" && segs[1] == "v1":
		rq.gv, segs = coreV1, segs[2:]
	case len(segs) >= 3 && segs[0] == "apis" && segs[1] == "events.k8s.io" && segs[2] == "v1":
		rq.gv, segs = eventsV1, segs[3:]
	default:
		return rq, false
	}
	if len(segs) >= 2 && segs[0] == "namespaces" {
		rq.namespace, segs = segs[1], segs[2:]
		if rq.namespace == "" {
			return rq, false
		}
	}
	switch {
	case len(segs) == 1 && segs[0] == "events":
	case len(segs) == 2 && segs[0] == "events" && segs[1] != "" && rq.namespace != "":
		rq.name = segs[1]
	default:
		return rq, false
	}
	return rq, true
}

func (a *API) serveResource(w http.ResponseWriter, r *http.Request, rq request) {
	ctx, err := runtime.AnnotateContext(r.Context(), a.annot, r, "/eventgate.v1.EventService/"+methodFor(r.Method, rq))
	if err != nil {
		writeStatus(w, badRequest(err.Error()))
		return
	}
	if rq.tenant == nil {
		t, st := a.callerTenant(r)
		if st != nil {
			writeStatus(w, st)
			return
		}
		rq.tenant = t
	}
	switch {
	case rq.name == "" && r.Method == http.MethodGet:
		a.list(ctx, w, r, rq)
	case rq.name == "" && r.Method == http.MethodPost:
		if rq.namespace == "" {
			writeStatus(w, methodNotAllowed("create needs a namespace: POST to .../namespaces/{namespace}/events"))
			return
		}
		a.create(ctx, w, r, rq)
	case rq.name != "" && r.Method == http.MethodGet:
		a.get(ctx, w, r, rq)
	case rq.name != "" && r.Method == http.MethodPut:
		a.update(ctx, w, r, rq)
	case rq.name != "" && r.Method == http.MethodPatch:
		a.patch(ctx, w, r, rq)
	case r.Method == http.MethodDelete:
		writeStatus(w, methodNotAllowed("events are immutable history in eventgate: they expire with the retention period and cannot be deleted"))
	default:
		writeStatus(w, methodNotAllowed(fmt.Sprintf("method %s is not supported on this path", r.Method)))
	}
}

// methodFor names the gRPC method a request mostly calls, for tracing.
func methodFor(method string, rq request) string {
	switch {
	case method == http.MethodGet && rq.name == "":
		return "Query"
	case method == http.MethodGet:
		return "Get"
	default:
		return "Emit"
	}
}

// callerTenant picks the tenant of a request that names none from the
// caller's credentials.
func (a *API) callerTenant(r *http.Request) (*eventgatev1.Tenant, *statusError) {
	ctx := r.Context()
	if h := r.Header.Values("Authorization"); len(h) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.MD{"authorization": h})
	}
	p, err := a.auth.Authenticate(ctx)
	if err != nil {
		return nil, unauthorized(err.Error())
	}
	t, err := tenantOf(p)
	if err != nil {
		return nil, forbidden(err.Error())
	}
	return &eventgatev1.Tenant{Type: t.Type, Name: t.Name}, nil
}

// tenantOf is the tenant a principal's Kubernetes requests address: its
// defaultTenant, else the one tenant its grants name.
func tenantOf(p *authz.Principal) (authz.Tenant, error) {
	if p.DefaultTenant != nil {
		t := *p.DefaultTenant
		if t.Type == event.TenantGlobal {
			t.Name = ""
		}
		return t, nil
	}
	if p.Admin {
		return authz.Tenant{Type: event.TenantGlobal}, nil
	}
	var ts []authz.Tenant
	for _, g := range p.Grants {
		if g.TenantName == authz.AnyName && g.TenantType != event.TenantGlobal {
			return authz.Tenant{}, fmt.Errorf("principal %q may reach every %s tenant: name one in the server URL (/tenants/{type}/{name})", p.Name, g.TenantType)
		}
		t := authz.Tenant{Type: g.TenantType, Name: g.TenantName}
		if t.Type == event.TenantGlobal {
			t.Name = ""
		}
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	switch len(ts) {
	case 0:
		return authz.Tenant{}, fmt.Errorf("principal %q has no grant", p.Name)
	case 1:
		return ts[0], nil
	}
	return authz.Tenant{}, fmt.Errorf("principal %q has grants on %d tenants and no defaultTenant: name one in the server URL (/tenants/{type}/{name})", p.Name, len(ts))
}
