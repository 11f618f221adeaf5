package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/gen/openapiv2"
	"github.com/eventgate/eventgate/internal/config"
	"github.com/eventgate/eventgate/internal/correlator"
	"github.com/eventgate/eventgate/internal/k8sapi"
	"github.com/eventgate/eventgate/internal/service"
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
	if st, ok := status.FromError(err); ok && st.Code() == codes.OutOfRange {
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusGone, Err: err}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// writeStatus writes a google.rpc.Status JSON body, the shape every REST error has.
func writeStatus(w http.ResponseWriter, st *status.Status) {
	b, err := jsonOut.Marshal(st.Proto())
	if err != nil {
		b = []byte(`{"code":13,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus(st.Code()))
	_, _ = w.Write(append(b, '\n'))
}

func newHTTPHandler(ctx context.Context, g *Gateway) (http.Handler, error) {
	gw := runtime.NewServeMux(
		runtime.WithErrorHandler(errorHandler),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: &runtime.JSONPb{}}),
	)
	client := eventgatev1.NewEventServiceClient(g.proxy)
	if err := eventgatev1.RegisterEventServiceHandlerClient(ctx, gw, client); err != nil {
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	if err := eventgatev1.RegisterAnalyticsServiceHandlerClient(ctx, gw, eventgatev1.NewAnalyticsServiceClient(g.proxy)); err != nil {
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		checks, ok := g.ready.check(r.Context())
		w.Header().Set("Content-Type", "application/json")
		body := map[string]any{"status": "ok", "checks": checks}
		if !ok {
			body["status"] = "unavailable"
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapiv2.Document)
	})
	mux.Handle("GET /v1/events:watch", watchHandler(gw, client))
	if err := webhook.Register(mux, webhook.Options{Client: client, Gateway: gw, MaxBatch: g.cfg.MaxBatch, MaxBodyBytes: g.cfg.MaxRequestBytes, MaxNoteBytes: g.cfg.Events.MaxNoteBytes, Flux: g.cfg.Flux, Log: g.log}); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	k8sapi.Register(mux, k8sapi.Options{Conn: g.proxy, Auth: g.auth, Config: g.cfg.K8s, Correlate: coreCorrelator(g.cfg), Log: g.log})
	mux.Handle("/", gw)
	h := limitBody(mux, int64(g.cfg.MaxRequestBytes))
	return otelhttp.NewHandler(h, "eventgate.rest", otelhttp.WithTracerProvider(g.tp), otelhttp.WithPropagators(telemetry.Propagator)), nil
}

// limitBody refuses a request body larger than max before anything decodes it.
func limitBody(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			b, _ := jsonOut.Marshal(status.Newf(codes.ResourceExhausted, "request body of %d bytes is larger than the limit of %d bytes", r.ContentLength, max).Proto())
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = w.Write(append(b, '\n'))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
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
			writeStatus(w, status.Newf(codes.InvalidArgument, "query parameters: %v", err))
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
		if err != nil || len(md.Get(service.WatchEstablishedHeader)) == 0 {
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
