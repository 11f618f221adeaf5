package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/cors"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/gen/openapiv2"
	"github.com/eventgate/eventgate/internal/console"
	"github.com/eventgate/eventgate/internal/correlator"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/k8sapi"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/telemetry"
	"github.com/eventgate/eventgate/internal/webhook"
)

var jsonOut = protojson.MarshalOptions{}

// httpStatus maps a gRPC code to HTTP as grpc-gateway does, except that an
// expired resourceVersion is 410 Gone, as Kubernetes answers it.
func httpStatus(c codes.Code) int {
	if c == codes.OutOfRange {
		return http.StatusGone
	}
	return runtime.HTTPStatusFromCode(c)
}

func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if st, ok := status.FromError(err); ok {
		setRetryAfter(w, st)
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.OutOfRange {
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusGone, Err: err}
	}
	if lb := limitedBodyOf(r); lb != nil && lb.exceeded.Load() {
		// A body without a Content-Length that ran over the limit while it
		// was read: the decoder's error is 413, not 400.
		writeStatusCode(w, http.StatusRequestEntityTooLarge, status.Newf(codes.ResourceExhausted, "request body is larger than the limit of %d bytes", lb.max))
		return
	}
	if derr := bodyDecodeError(r); derr != nil && status.Code(err) == codes.InvalidArgument {
		// The body did not decode: name the field the decoder stopped at
		// (google.rpc.BadRequest), as every other invalid request does.
		writeStatus(w, invalidField(derr.Error(), decodeErrorField(derr), derr.Error()))
		return
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument && len(st.Details()) == 0 {
		// A query parameter the request cannot take (strictQuery): name it.
		if qst, ok := queryParamStatus(st.Message()); ok {
			writeStatus(w, qst)
			return
		}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// decodeFieldRE finds the field a protojson error names.
var decodeFieldRE = regexp.MustCompile(`(?:unknown field|field|duplicate field) "?([A-Za-z0-9_.\[\]]+)"?`)

// decodeErrorField is the field a body decode error is about, or "body".
func decodeErrorField(err error) string {
	if f, ok := bodyField(err); ok {
		return f
	}
	if m := decodeFieldRE.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return "body"
}

// routingErrorHandler answers a known path asked with the wrong method 405
// Method Not Allowed (grpc-gateway says 501 Not Implemented), with the methods
// it takes in Allow.
func routingErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, code int) {
	if code == http.StatusMethodNotAllowed {
		writeMethodNotAllowed(w, r, allowedMethods(r.URL.Path))
		return
	}
	runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, code)
}

// allowedMethods are the methods the REST API serves on path.
func allowedMethods(path string) string {
	switch {
	case path == "/v1/events":
		return "GET, HEAD, POST"
	case strings.HasPrefix(path, "/v1/"):
		return "GET, HEAD"
	}
	return ""
}

// writeMethodNotAllowed answers 405 with a google.rpc.Status body.
func writeMethodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	if allow != "" {
		w.Header().Set("Allow", allow)
	}
	writeStatusCode(w, http.StatusMethodNotAllowed, status.Newf(codes.Unimplemented, "method %s is not allowed on %s", r.Method, r.URL.Path))
}

// only serves h for method (and HEAD with GET) and answers 405 otherwise.
func only(method string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			allow := method
			if method == http.MethodGet {
				allow = "GET, HEAD"
			}
			writeMethodNotAllowed(w, r, allow)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// invalidField is an InvalidArgument status whose google.rpc.BadRequest
// names field.
func invalidField(msg, field, description string) *status.Status {
	st := status.New(codes.InvalidArgument, msg)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: description}}}); err == nil {
		st = d
	}
	return st
}

// writeStatus writes a google.rpc.Status JSON body, the shape every REST error has.
func writeStatus(w http.ResponseWriter, st *status.Status) {
	writeStatusCode(w, httpStatus(st.Code()), st)
}

// writeStatusCode is writeStatus with an HTTP status of its own (413, 405:
// no gRPC code maps to them).
func writeStatusCode(w http.ResponseWriter, code int, st *status.Status) {
	setRetryAfter(w, st)
	b, err := jsonOut.Marshal(st.Proto())
	if err != nil {
		b = []byte(`{"code":13,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// setRetryAfter tells a caller over a limit when to try again (the
// status's RetryInfo), as the Retry-After header HTTP clients honour.
func setRetryAfter(w http.ResponseWriter, st *status.Status) {
	if s := limits.RetryAfterSeconds(st); s > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
}

func newHTTPHandler(ctx context.Context, g *Gateway) (http.Handler, error) {
	useStrictQuery()
	gw := runtime.NewServeMux(
		runtime.WithErrorHandler(errorHandler),
		runtime.WithRoutingErrorHandler(routingErrorHandler),
		// A form-encoded POST is a POST (405 where only GET is served), not
		// a GET whose parameters are in the body.
		runtime.WithDisablePathLengthFallback(),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: &strictJSON{JSONPb: &runtime.JSONPb{}}}),
	)
	// The generated handlers decode each request into a message of their
	// own and read it no more once they made the call: they hand it off.
	rest := g.rest
	rest.handOff = true
	client := eventgatev1.NewEventServiceClient(rest)
	if err := eventgatev1.RegisterEventServiceHandlerClient(ctx, gw, client); err != nil {
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	if err := eventgatev1.RegisterAnalyticsServiceHandlerClient(ctx, gw, eventgatev1.NewAnalyticsServiceClient(rest)); err != nil {
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	if err := eventgatev1.RegisterTenantServiceHandlerClient(ctx, gw, eventgatev1.NewTenantServiceClient(rest)); err != nil {
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	if err := eventgatev1.RegisterRulesServiceHandlerClient(ctx, gw, eventgatev1.NewRulesServiceClient(rest)); err != nil {
		return nil, fmt.Errorf("rules rest gateway: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz", only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})))
	mux.Handle("/readyz", only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks, ok := g.ready.check(r.Context())
		w.Header().Set("Content-Type", "application/json")
		body := map[string]any{"status": "ok", "checks": checks, "replica": g.replica.status()}
		if !ok {
			body["status"] = "unavailable"
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})))
	mux.Handle("/metrics", only(http.MethodGet, promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{})))
	mux.Handle("/openapi.json", only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapiv2.Document)
	})))
	mux.Handle("/v1/events:watch", only(http.MethodGet, watchHandler(gw, client)))
	if err := webhook.Register(mux, webhook.Options{Client: eventgatev1.NewEventServiceClient(g.rest), Gateway: gw, MaxBatch: g.cfg.MaxBatch, MaxBodyBytes: g.cfg.MaxRequestBytes, MaxNoteBytes: g.cfg.Events.MaxNoteBytes, Flux: g.cfg.Flux, Log: g.log}); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	k8sapi.Register(mux, k8sapi.Options{Conn: g.rest, Auth: g.auth, Config: g.cfg.K8s, Correlate: coreCorrelator(g.cfg), Log: g.log})
	console.Register(mux)
	mux.Handle("/", headAsGet(queryFreeEmit(gw)))
	h := withCORS(limitBody(validURL(mux), int64(g.cfg.MaxRequestBytes)), g.cfg.CORSAllowedOrigins)
	return otelhttp.NewHandler(h, "eventgate.rest", otelhttp.WithTracerProvider(g.tp), otelhttp.WithPropagators(telemetry.Propagator)), nil
}

// withCORS lets browser pages from origins call the REST API: it answers
// their preflight requests itself and marks the answers they may read.
// Bearer tokens travel in the Authorization header, so no credentials
// (cookies) are allowed. Without origins, next is served as it is.
func withCORS(next http.Handler, origins []string) http.Handler {
	if len(origins) == 0 {
		return next
	}
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: []string{http.MethodGet, http.MethodPost},
		AllowedHeaders: []string{"Authorization", "Content-Type", webhook.IdempotencyKeyHeader, "Traceparent", "Tracestate"},
		MaxAge:         600,
	}).Handler(next)
}

// headAsGet answers HEAD as GET, without the body (net/http drops what a
// handler writes to a HEAD request's response).
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			r = r.Clone(r.Context())
			r.Method = http.MethodGet
		}
		next.ServeHTTP(w, r)
	})
}

// queryFreeEmit refuses query parameters on POST /v1/events: its request is
// the body, and the REST gateway would drop them unread (an event meant for
// ?tenant.type=project&tenant.name=shop stored in the default tenant).
func queryFreeEmit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/events" || r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		q, _ := url.ParseQuery(r.URL.RawQuery)
		keys := slices.Sorted(maps.Keys(q))
		param := r.URL.RawQuery // a query without a key=value pair
		if len(keys) > 0 {
			param = keys[0]
		}
		writeStatus(w, (&queryParamError{Param: param, Description: "POST /v1/events takes no query parameters: its request, tenant included, is the JSON body"}).status())
	})
}

// limitBody refuses a request body larger than max before anything decodes
// it: by its Content-Length when it has one, else when reading it runs over
// max (the REST gateway then answers 413 too, see errorHandler).
func limitBody(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			writeStatusCode(w, http.StatusRequestEntityTooLarge,
				status.Newf(codes.ResourceExhausted, "request body of %d bytes is larger than the limit of %d bytes", r.ContentLength, max))
			return
		}
		lb := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, max), max: max}
		r.Body = lb
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), limitedBodyKey{}, lb)))
	})
}

type limitedBodyKey struct{}

// limitedBody notes that a read ran over the body limit, and why the REST
// gateway could not decode the body.
type limitedBody struct {
	io.ReadCloser
	max       int64
	exceeded  atomic.Bool
	decodeErr atomic.Pointer[error]
}

// limitedBodyOf is r's body as limitBody wrapped it, or nil.
func limitedBodyOf(r *http.Request) *limitedBody {
	lb, _ := r.Context().Value(limitedBodyKey{}).(*limitedBody)
	return lb
}

// bodyDecodeError is why r's body did not decode, or nil.
func bodyDecodeError(r *http.Request) error {
	if lb := limitedBodyOf(r); lb != nil {
		if p := lb.decodeErr.Load(); p != nil {
			return *p
		}
	}
	return nil
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		b.exceeded.Store(true)
	}
	return n, err
}

// validURL answers 400 for a path or query that is not valid UTF-8 once
// unescaped: no string field can carry it, and the REST gateway's gRPC
// client would fail to marshal it (a 500). The Kubernetes API's paths get a
// Kubernetes Status body.
func validURL(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		what, field := invalidURLPart(r.URL)
		if what == "" {
			next.ServeHTTP(w, r)
			return
		}
		msg := "the " + what + " is not valid UTF-8 text once unescaped"
		if k8sapi.Serves(r.URL.Path) {
			k8sapi.WriteBadRequest(w, msg)
			return
		}
		writeStatus(w, invalidField(msg, field, "must be valid UTF-8"))
	})
}

// invalidURLPart names the part of u that is not valid UTF-8 once
// unescaped, and the field to report it as; "" when there is none. Query
// pairs that do not parse are left to the handler, as net/http does.
func invalidURLPart(u *url.URL) (what, field string) {
	if !utf8.ValidString(u.Path) {
		return "path", "path"
	}
	q, _ := url.ParseQuery(u.RawQuery)
	for k, vs := range q {
		if !utf8.ValidString(k) {
			return "query parameter name", "query parameter name"
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return "query parameter " + k, k
			}
		}
	}
	return "", ""
}

// strictJSON is the REST gateway's JSON marshaler with a decoder that takes
// exactly one JSON value: data after it (a second value, stray text) is an
// error, not ignored.
type strictJSON struct {
	*runtime.JSONPb
}

// NewDecoder implements runtime.Marshaler.
// Marshal writes v as the REST gateway does, with an event's times as
// Kubernetes writes them (microTimes).
func (m *strictJSON) Marshal(v any) ([]byte, error) {
	b, err := m.JSONPb.Marshal(v)
	if err != nil {
		return nil, err
	}
	return microTimes(b), nil
}

func (m *strictJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		err := m.decode(r, v)
		if lb, ok := r.(*limitedBody); ok && err != nil && !errors.Is(err, io.EOF) {
			lb.decodeErr.Store(&err)
		}
		return err
	})
}

// bodies holds the buffers the REST gateway reads request bodies into:
// protojson copies what it keeps of a body, so its buffer is free once the
// body decoded. io.ReadAll grew a new one for each request, twice the
// body's size (1.7 KB a REST event of the bench's workload).
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer kept for the next body.
const maxPooledBody = 1 << 20

func (m *strictJSON) decode(r io.Reader, v any) error {
	buf := bodies.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodies.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(r); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	b := buf.Bytes()
	if len(bytes.TrimSpace(b)) == 0 {
		return io.EOF // no body: an empty request, as the generated handlers take it
	}
	// protojson alone takes exactly one JSON value, as strictly as the
	// checks below: one pass over the body where they make three (the
	// value's extent, the REST gateway's own, protojson's). Whatever it
	// refuses goes the long way, which words the error.
	if pm, ok := v.(proto.Message); ok && m.UnmarshalOptions.Unmarshal(b, pm) == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("request body is not JSON: %w", err)
	}
	if off := dec.InputOffset(); len(bytes.TrimSpace(b[off:])) > 0 {
		return fmt.Errorf("request body has data after its JSON value, at offset %d", off)
	}
	if err := m.JSONPb.Unmarshal(raw, v); err != nil {
		if pm, ok := v.(proto.Message); ok {
			if fe := withBodyField(raw, pm.ProtoReflect().Descriptor(), err); fe != err {
				return fe
			}
		}
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

// watchHandler serves GET /v1/events:watch as newline-delimited JSON, one
// Kubernetes-style watch event per line ({"type":"ADDED","object":{…}}).
// It is a client of the gRPC StreamWatch like the rest of the REST API, so
// the same interceptors run; it exists so that a watch that cannot start
// answers with the right HTTP status (410 for an expired resourceVersion)
// and the lines carry no envelope.
func watchHandler(gw *runtime.ServeMux, client eventgatev1.EventServiceClient) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := &eventgatev1.StreamWatchRequest{}
		if err := runtime.PopulateQueryParameters(req, r.URL.Query(), utilities.NewDoubleArray(nil)); err != nil {
			st := status.Newf(codes.InvalidArgument, "query parameters: %v", err)
			var qe *queryParamError
			if errors.As(err, &qe) {
				st = qe.status()
			}
			writeStatus(w, st)
			return
		}
		ctx, err := runtime.AnnotateContext(r.Context(), gw, r, "/eventgate.v1.EventService/StreamWatch", runtime.WithHTTPPathPattern("/v1/events:watch"))
		if err != nil {
			writeStatus(w, status.Convert(err))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := client.StreamWatch(ctx, req)
		if err != nil {
			writeStatus(w, status.Convert(err))
			return
		}
		md, err := stream.Header()
		if err != nil || len(md.Get(event.WatchEstablishedHeader)) == 0 {
			// The watch failed before it started: its status is the response.
			if _, rerr := stream.Recv(); rerr != nil {
				err = rerr
			}
			writeStatus(w, status.Convert(err))
			return
		}
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		for {
			resp, err := stream.Recv()
			if err != nil {
				if ctx.Err() == nil {
					writeErrorLine(w, status.Convert(err))
					_ = rc.Flush()
				}
				return
			}
			b, err := jsonOut.Marshal(resp)
			if err != nil {
				return
			}
			b = microTimes(b)
			if _, err := w.Write(append(b, '\n')); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	})
}

// writeErrorLine ends a watch stream with {"type":"ERROR","error":{status}}.
func writeErrorLine(w http.ResponseWriter, st *status.Status) {
	if st.Code() == codes.OK {
		return
	}
	b, err := jsonOut.Marshal(st.Proto())
	if err != nil {
		return
	}
	_, _ = w.Write([]byte(`{"type":"ERROR","error":` + string(b) + `,"httpCode":` + strconv.Itoa(httpStatus(st.Code())) + "}\n"))
}

// coreCorrelator is client-go's EventCorrelator grouping for core/v1 creates
// when --k8s-core-correlate is on.
func coreCorrelator(cfg config.Config) func(*eventgatev1.Event, time.Time) *eventgatev1.Event {
	if !cfg.K8sCoreCorrelate {
		return nil
	}
	c := correlator.DefaultConfig()
	c.MaxNoteBytes = cfg.Events.MaxNoteBytes
	return correlator.New(c).Correlate
}
