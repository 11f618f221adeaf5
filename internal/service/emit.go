// Package service implements eventgate's gRPC services. It validates
// requests, calls the pipeline, and maps internal errors to gRPC status codes
// at this edge only.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/subject"
)

// Publisher stores event versions durably in the events stream and returns
// their acknowledgements.
type Publisher interface {
	// Start sends ws, after those of every Start before it; wait, called
	// once, returns their acknowledgements in order once all are durable.
	Start(ws []wire.Write) (wait func(context.Context) ([]wire.Ack, error), err error)
}

// Intake logs occurrences durably and aggregates isomorphic repeats into
// series before they reach the events stream.
type Intake interface {
	// Start logs evs (as the emitter counted them when asIs), after the
	// occurrences of every Start before it; wait, called once, returns
	// what each became once all are durable.
	Start(ctx context.Context, evs []*eventgatev1.Event, msgIDs []string, asIs bool) (wait func() ([]event.Emitted, error), err error)
}

// EventsConfig configures the EventService.
type EventsConfig struct {
	Normalizer  event.Normalizer
	MaxBatch    int
	WatchBuffer int
	// Intake, when set, takes every emitted event (server-side series);
	// otherwise events are published to the events stream as they are.
	Intake Intake
	// Limits, when set, are the emit rate limits and the watch and query
	// quotas and guardrails.
	Limits *limits.Limiter
	// SendEncoded: the server's codec sends an Encoded message's bytes as
	// they are (internal/gateway's does). StreamWatch then sends each event
	// as the stream stores it, instead of encoding it again for every
	// watcher, and the live feed decodes it only for the watchers that
	// filter on more than subjects.
	SendEncoded bool
}

// Encoded is a response already in the protobuf wire format, for a server
// codec that sends it as it is (EventsConfig.SendEncoded).
type Encoded []byte

// EncodedMessage returns the bytes to send.
func (e Encoded) EncodedMessage() []byte { return e }

// EncodedParts is a response already in the protobuf wire format in parts
// sent one after the other, for a server codec that sends them as they are
// (EventsConfig.SendEncoded): a watch event's frame around the stored
// event's bytes, which are not copied.
type EncodedParts [][]byte

// EncodedParts returns the parts to send in turn.
func (e EncodedParts) EncodedParts() [][]byte { return e }

// Events implements eventgate.v1.EventService.
type Events struct {
	eventgatev1.UnimplementedEventServiceServer

	cfg     EventsConfig
	pub     Publisher
	watch   Watcher
	store   Store
	floor   Floor
	log     *slog.Logger
	tracer  trace.Tracer
	metrics *Metrics

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain
}

// Metrics are the service's metrics.
type Metrics struct {
	emitted  *prometheus.CounterVec
	rejected prometheus.Counter
}

// NewMetrics registers the service's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		emitted:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eventgate_events_emitted_total", Help: "Events accepted, by outcome."}, []string{"outcome"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_events_rejected_total", Help: "Events refused as invalid."}),
	}
	if reg != nil {
		reg.MustRegister(m.emitted, m.rejected)
	}
	return m
}

// NewEvents returns the EventService.
func NewEvents(cfg EventsConfig, pub Publisher, w Watcher, store Store, floor Floor, log *slog.Logger, tp trace.TracerProvider, m *Metrics) *Events {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Events{cfg: cfg, pub: pub, watch: w, store: store, floor: floor, log: log, tracer: tp.Tracer("github.com/eventgate/eventgate/internal/service"), metrics: m,
		draining: make(chan struct{})}
}

// ErrDraining ends an emit stream when the gateway shuts down: every batch
// acknowledged before it is stored; the emitter sends the rest to another
// gateway (or to this one when it is back).
var ErrDraining = errors.New("gateway shutting down: the batches acknowledged on this stream are stored; send the rest again")

// Drain makes open emit streams stop taking batches: each acknowledges what
// it took, then ends with Unavailable (ErrDraining).
func (s *Events) Drain() {
	s.drainOnce.Do(func() { close(s.draining) })
}

// Emit implements EventService.Emit.
func (s *Events) Emit(ctx context.Context, req *eventgatev1.EmitRequest) (*eventgatev1.EmitResponse, error) {
	results, err := s.emit(ctx, batch{req.GetEvents(), req.GetTenant(), req.GetIdempotencyKey(), req.GetClientCounted()})
	if err != nil {
		return nil, toStatus(s.log, "Emit", err)
	}
	return &eventgatev1.EmitResponse{Results: results}, nil
}

// EmitStream implements EventService.EmitStream: batches are validated and
// published as they arrive, in order, and acknowledged in order once
// durable. On Drain it stops taking batches, acknowledges those it took and
// ends with Unavailable.
func (s *Events) EmitStream(stream eventgatev1.EventService_EmitStreamServer) error {
	ctx := stream.Context()
	acks := make(chan pendingAck, 64) // batches in flight; bounds memory and applies back-pressure
	sendErr := make(chan error, 1)
	go s.sendAcks(stream, acks, sendErr)
	// Receiving runs apart, so that a drain ends a stream whose emitter
	// sends nothing; it stops at the stream's end or when this returns.
	reqs := make(chan received)
	done := make(chan struct{})
	defer close(done)
	go receive(stream, reqs, done)
	var recvErr error
	drained := false
loop:
	for {
		var r received
		select {
		case r = <-reqs:
		case <-s.draining:
			drained = true
			break loop
		}
		var wait func() ([]*eventgatev1.EmitResult, error)
		switch err := r.err; {
		case err == nil:
			req := r.req
			wait, err = s.startEmit(ctx, batch{req.GetEvents(), req.GetTenant(), req.GetIdempotencyKey(), req.GetClientCounted()})
			if err != nil {
				wait = func() ([]*eventgatev1.EmitResult, error) { return nil, err }
			}
		case IsBadMessage(err):
			// A batch that does not decode or is too large (the server's
			// decode guard read it whole and refused it): it gets an error
			// ack in its place and the stream goes on, as for any bad batch.
			wait = func() ([]*eventgatev1.EmitResult, error) { return nil, err }
		default:
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break loop
		}
		select {
		case acks <- pendingAck{id: r.req.GetBatchId(), wait: wait, req: r.req}:
		case err := <-sendErr:
			close(acks)
			return err
		}
	}
	close(acks)
	if err := <-sendErr; err != nil {
		return err
	}
	if drained {
		return toStatus(s.log, "EmitStream", ErrDraining)
	}
	return recvErr
}

// pendingAck is a batch an emit stream took: its id, and the wait for its
// results.
type pendingAck struct {
	id   string
	wait func() ([]*eventgatev1.EmitResult, error)
	// req is the batch, released once its acknowledgement is sent: wait
	// has returned, and nothing holds its events any more.
	req *StreamBatch
}

// sendAcks answers the batches of acks in order, each once its results are
// in; it closes sendErr at the end, after sending it Send's error, if any
// (then it drains acks, so that the receiver never blocks).
func (s *Events) sendAcks(stream eventgatev1.EventService_EmitStreamServer, acks <-chan pendingAck, sendErr chan<- error) {
	defer close(sendErr)
	for p := range acks {
		resp := &eventgatev1.EmitStreamResponse{BatchId: p.id}
		results, err := p.wait()
		if err != nil {
			resp.Error = emitError(toStatus(s.log, "EmitStream", err))
		} else {
			resp.Results = results
		}
		if err := stream.Send(resp); err != nil {
			sendErr <- err
			for range acks { // drain so the receiver never blocks
			}
			return
		}
		putStreamBatch(p.req)
	}
}

// received is what one Recv of an emit stream returned.
type received struct {
	req *StreamBatch // nil when the stream ended
	err error
}

// receive passes what stream receives to reqs until the stream ends (an
// error other than a refused message) or done is closed.
//
// Each batch is received into a StreamBatch that the batch before it
// (of any stream) has released: sendAcks releases it once its
// acknowledgement is sent.
func receive(stream eventgatev1.EventService_EmitStreamServer, reqs chan<- received, done <-chan struct{}) {
	for {
		req := getStreamBatch()
		err := stream.RecvMsg(req)
		if err != nil && !IsBadMessage(err) {
			putStreamBatch(req)
			req = nil
		}
		select {
		case reqs <- received{req, err}:
		case <-done:
			return
		}
		if err != nil && !IsBadMessage(err) {
			return
		}
	}
}

// badMessageReason marks a request message the server read whole and
// refused (it does not decode, or is over the size limit): the call or
// stream it came on is intact.
const badMessageReason = "BAD_REQUEST_MESSAGE"

// BadMessageInfo is the status detail of a refused request message.
func BadMessageInfo() *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: badMessageReason, Domain: "eventgate.io"}
}

// IsBadMessage reports whether err refused one request message (see
// BadMessageInfo).
func IsBadMessage(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == badMessageReason && ei.GetDomain() == "eventgate.io" {
			return true
		}
	}
	return false
}

func emitError(err error) *eventgatev1.EmitError {
	st := status.Convert(err)
	e := &eventgatev1.EmitError{Code: st.Code().String(), Message: st.Message()}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, &eventgatev1.FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		case *errdetails.RetryInfo:
			e.RetryAfter = d.GetRetryDelay()
		}
	}
	return e
}

// batch is what an Emit or an EmitStream batch asks to store.
type batch struct {
	events  []*eventgatev1.Event
	tenant  *eventgatev1.Tenant // for the events that name none
	idemKey string
	// counted: the emitter counts its own series; nothing is folded.
	counted bool
}

func (s *Events) emit(ctx context.Context, b batch) ([]*eventgatev1.EmitResult, error) {
	wait, err := s.startEmit(ctx, b)
	if err != nil {
		return nil, err
	}
	return wait()
}

// startEmit validates a batch and starts publishing it; wait returns the
// results once every event is durable.
func (s *Events) startEmit(ctx context.Context, b batch) (func() ([]*eventgatev1.EmitResult, error), error) {
	callerUID, err := s.admit(ctx, b)
	if err != nil {
		return nil, err
	}
	if s.cfg.Intake != nil {
		return s.startIntake(ctx, b.events, callerUID, b.idemKey, b.counted)
	}
	return s.startPublish(ctx, b.events, callerUID, b.idemKey)
}

// admit validates and normalizes a batch, and checks that the caller may
// emit it now (authorization, limits). callerUID[i] reports that the
// caller named event i's uid.
func (s *Events) admit(ctx context.Context, b batch) (callerUID []bool, err error) {
	evs, def, idemKey := b.events, b.tenant, b.idemKey
	if len(evs) == 0 {
		return nil, invalid("events", "at least one event is required")
	}
	if len(evs) > s.cfg.MaxBatch {
		return nil, invalid("events", "at most %d events per batch, got %d", s.cfg.MaxBatch, len(evs))
	}
	if len(idemKey) > 256 {
		return nil, invalid("idempotencyKey", "must be at most 256 bytes")
	}
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	if def == nil || (def.Type == "" && def.Name == "") {
		if t, err := p.DefaultEmitTenant(); err == nil {
			def = &eventgatev1.Tenant{Type: t.Type, Name: t.Name}
		}
	}
	if def != nil && (def.Type != "" || def.Name != "") {
		if vs := event.ValidateTenant(def); len(vs) > 0 {
			return nil, tenantInvalid(vs)
		}
	}
	var vs []event.Violation
	callerUID = make([]bool, len(evs))
	for i, ev := range evs {
		if ev == nil {
			vs = append(vs, event.Violation{Field: fmt.Sprintf("events[%d]", i), Description: "must not be null"})
			continue
		}
		callerUID[i] = ev.Uid != ""
		vs = append(vs, s.cfg.Normalizer.Normalize(ev, def, idemKey, "events["+strconv.Itoa(i)+"]")...)
	}
	if len(vs) > 0 {
		s.metrics.rejected.Add(float64(len(evs)))
		return nil, &InvalidError{Violations: vs}
	}
	for i, ev := range evs {
		t := authz.Tenant{Type: ev.GetTenant().GetType(), Name: ev.GetTenant().GetName()}
		if err := p.AuthorizeEmit(t, subject.GroupFromAPIVersion(ev.GetRegarding().GetApiVersion()), ev.GetRegarding().GetKind()); err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
	}
	if err := limitEmit(s.cfg.Limits, p, evs); err != nil {
		return nil, err
	}
	return callerUID, nil
}

// startPublish publishes evs to the events stream as they are (no series
// are folded); wait returns the results once every event is durable.
func (s *Events) startPublish(ctx context.Context, evs []*eventgatev1.Event, callerUID []bool, idemKey string) (func() ([]*eventgatev1.EmitResult, error), error) {
	ws := make([]wire.Write, len(evs))
	for i, ev := range evs {
		ws[i] = wire.Write{Event: ev, ID: event.MsgID(ev, callerUID[i], idemKey), Trace: ctx}
	}
	// Sent now, in the order of the batches (an emit stream's batches are
	// stored in the order they came); the caller waits for the
	// acknowledgements.
	waitAcks, err := s.pub.Start(ws)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return func() ([]*eventgatev1.EmitResult, error) {
		acks, err := waitAcks(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		results := make([]*eventgatev1.EmitResult, len(evs))
		for i, ack := range acks {
			r := &eventgatev1.EmitResult{
				Uid:             evs[i].Uid,
				Name:            evs[i].Name,
				ResourceVersion: strconv.FormatUint(ack.Sequence, 10),
				Outcome:         eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED,
			}
			if ack.Duplicate {
				r.Outcome = eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE
			}
			s.metrics.emitted.WithLabelValues(r.Outcome.String()).Inc()
			results[i] = r
		}
		return results, nil
	}, nil
}

// principal is the authenticated caller; the interceptor always sets one.
func principal(ctx context.Context) (*authz.Principal, error) {
	p, ok := authz.FromContext(ctx)
	if !ok {
		return nil, authz.ErrUnauthenticated
	}
	return p, nil
}

// startIntake hands a validated batch to the intake, after the batches
// started before it; wait returns once every event is durable, with what
// each became when the owners decided in time.
func (s *Events) startIntake(ctx context.Context, evs []*eventgatev1.Event, callerUID []bool, idemKey string, counted bool) (func() ([]*eventgatev1.EmitResult, error), error) {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = event.MsgID(ev, callerUID[i], idemKey)
	}
	waitIntake, err := s.cfg.Intake.Start(ctx, evs, ids, counted)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return func() ([]*eventgatev1.EmitResult, error) {
		res, err := waitIntake()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		results := make([]*eventgatev1.EmitResult, len(evs))
		for i, r := range res {
			er := &eventgatev1.EmitResult{Uid: r.UID, SeriesUid: r.SeriesUID, Outcome: r.Outcome}
			if r.ResourceVersion > 0 {
				er.ResourceVersion = strconv.FormatUint(r.ResourceVersion, 10)
			}
			switch r.Outcome {
			case eventgatev1.EmitOutcome_EMIT_OUTCOME_UNSPECIFIED:
				er.Outcome = eventgatev1.EmitOutcome_EMIT_OUTCOME_ACCEPTED
				er.Uid = evs[i].Uid
			case eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED:
				er.Name = evs[i].Name
			case eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE:
				if r.ResourceVersion > 0 { // stored as an event of its own
					er.Name = evs[i].Name
				}
			}
			s.metrics.emitted.WithLabelValues(er.Outcome.String()).Inc()
			results[i] = er
		}
		return results, nil
	}, nil
}
