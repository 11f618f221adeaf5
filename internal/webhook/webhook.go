// Package webhook takes events in over HTTP in the shapes other systems
// already send: a batched events.k8s.io/v1 EventList (POST /webhook/events,
// the audit-webhook style of the design doc), Flux notification-controller
// event payloads (POST /webhook/flux, with Flux RFC-0008 metadata rules)
// and CloudEvents over HTTP (POST /webhook/cloudevents: structured, binary
// and batched modes, read with the CloudEvents Go SDK).
//
// All are clients of the gRPC EventService over the gateway's in-process
// connection, forwarding the caller's credentials, so authentication,
// authorization, validation, series and storage are exactly Emit's. Emit
// refuses a whole batch for one bad event; the EventList and CloudEvents
// batch handlers therefore group items per tenant, and when Emit refuses a
// group they take out the items Emit named (validation) or split the group
// per kind (authorization, which depends only on tenant and kind) and emit
// the rest again, so that good items are stored and every item gets its
// own result.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// Paths the handlers are served on.
const (
	EventsPath = "/webhook/events"
	FluxPath   = "/webhook/flux"
)

// Options are what the handlers need from the gateway.
type Options struct {
	// Client is the EventService over the gateway's in-process connection.
	Client eventgatev1.EventServiceClient
	// Gateway is the REST gateway's mux: runtime.AnnotateContext with it
	// turns the request's Authorization header into gRPC metadata, as for
	// every REST call.
	Gateway *runtime.ServeMux
	// MaxBatch is Emit's batch limit; an EventList may hold at most this many items.
	MaxBatch int
	// MaxBodyBytes bounds a request body (default 4 MiB).
	MaxBodyBytes int
	// MaxNoteBytes is the note limit; a longer Flux message is cut to it.
	MaxNoteBytes int
	// Flux configures the Flux endpoint.
	Flux FluxConfig
	// Log receives metadata conflicts and internal errors.
	Log *slog.Logger
}

// Register serves POST /webhook/events, POST /webhook/flux and POST
// /webhook/cloudevents on mux.
func Register(mux *http.ServeMux, o Options) error {
	meta, err := newTenantMetadata(o.Flux.TenantMetadata)
	if err != nil {
		return err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxBatch < 1 {
		o.MaxBatch = 1000
	}
	if o.MaxBodyBytes < 1 {
		o.MaxBodyBytes = 4 << 20
	}
	h := &handler{opts: o, em: &emitter{client: o.Client, maxBatch: o.MaxBatch}, k8s: &emitter{client: o.Client, maxBatch: o.MaxBatch, counted: true}, meta: meta}
	mux.HandleFunc("POST "+EventsPath, h.events)
	mux.HandleFunc("POST "+FluxPath, h.flux)
	mux.HandleFunc("POST "+CloudEventsPath, h.cloudEvents)
	return nil
}

type handler struct {
	opts Options
	em   *emitter // Flux: occurrences, folded into series by the server
	k8s  *emitter // EventList: Kubernetes events, counted by their emitters
	meta *tenantMetadata
}

// outgoing is the request's context with its credentials as gRPC metadata.
func (h *handler) outgoing(r *http.Request, path string) (context.Context, error) {
	return runtime.AnnotateContext(r.Context(), h.opts.Gateway, r, "/eventgate.v1.EventService/Emit", runtime.WithHTTPPathPattern(path))
}

var jsonOut = protojson.MarshalOptions{}

// writeStatus writes a google.rpc.Status JSON body, the shape every REST
// error of the gateway has, with the HTTP status of its code.
func writeStatus(w http.ResponseWriter, st *status.Status) {
	b, err := jsonOut.Marshal(st.Proto())
	if err != nil {
		b = []byte(`{"code":13,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
	_, _ = w.Write(append(b, '\n'))
}

// badRequest is an InvalidArgument status naming the offending fields.
func badRequest(vs ...event.Violation) *status.Status {
	msg := "invalid request"
	if len(vs) > 0 {
		msg = "invalid " + vs[0].Field + ": " + vs[0].Description
	}
	st := status.New(codes.InvalidArgument, msg)
	br := &errdetails.BadRequest{}
	for _, v := range vs {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
	}
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st
}

// writeBodyError answers a failure to read or decode the request body: 413
// when it is larger than the limit, else 400 naming the field (or "body").
func writeBodyError(w http.ResponseWriter, err error, prefix string) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		b, _ := jsonOut.Marshal(status.Newf(codes.ResourceExhausted, "request body is larger than the limit of %d bytes", tooBig.Limit).Proto())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = w.Write(append(b, '\n'))
		return
	}
	writeStatus(w, badRequest(decodeViolation(err, prefix)))
}

// decodeViolation names the field a JSON decoding error is about.
func decodeViolation(err error, prefix string) event.Violation {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return event.Violation{Field: join(prefix, typeErr.Field), Description: "has the wrong type: got a JSON " + typeErr.Value}
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return event.Violation{Field: or(prefix, "body"), Description: "is not valid JSON: " + syntaxErr.Error()}
	}
	return event.Violation{Field: or(prefix, "body"), Description: "cannot be decoded: " + err.Error()}
}

func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// writeJSON writes v as JSON with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeStatus(w, status.New(codes.Internal, "internal error"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
