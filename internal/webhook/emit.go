package webhook

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/subject"
)

// item is one event to emit and where it came from in the request.
type item struct {
	// index is the item's position in the request.
	index int
	ev    *eventgatev1.Event
	// tenant is the tenant the request named for the item; nil for the
	// caller's default tenant, which Emit resolves.
	tenant *eventgatev1.Tenant
	// version, for an item that carries its own uid, names this write of
	// the event (a series update sends the same uid again): Emit's
	// idempotency key, so that a new version is not taken for a retry of the
	// previous one while a retry of the same version still is.
	version string
	// field names a field of the request from the path Emit uses for it
	// relative to the event (".regarding.kind", "" for the event itself).
	field func(rel string) string
	// result is set once the item is decided: either res or err.
	res *eventgatev1.EmitResult
	err *eventgatev1.EmitError
	// retryAfter is, for an item refused over a limit, the seconds to wait
	// before sending it again.
	retryAfter int
}

func (it *item) done() bool { return it.res != nil || it.err != nil }

// fail decides the item as refused with st.
func (it *item) fail(code codes.Code, msg string, vs ...*eventgatev1.FieldViolation) {
	it.err = &eventgatev1.EmitError{Code: code.String(), Message: msg, FieldViolations: vs}
}

// emitter emits items through Emit, per tenant, keeping the good ones when
// Emit refuses a batch.
type emitter struct {
	client   eventgatev1.EventServiceClient
	maxBatch int
	// counted: the events come from Kubernetes, where their emitters
	// counted their series: stored as they are (EmitRequest.clientCounted).
	counted bool
}

// emit decides every item. It returns a status instead when the request as
// a whole cannot go on: the caller is not authenticated, or went away.
func (e *emitter) emit(ctx context.Context, items []*item) *status.Status {
	var order []string
	groups := map[string][]*item{}
	for _, it := range items {
		if it.done() {
			continue
		}
		k := "\x00" + it.version // "": the caller's default tenant
		if it.tenant != nil {
			k = it.tenant.GetType() + "/" + it.tenant.GetName() + k
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], it)
	}
	for _, k := range order {
		g := groups[k]
		for len(g) > 0 {
			n := min(len(g), e.maxBatch)
			if st := e.emitGroup(ctx, g[:n], true); st != nil {
				return st
			}
			g = g[n:]
		}
	}
	return nil
}

// emitGroup emits items of one tenant. When Emit refuses them it decides the
// items the refusal is about and emits the others again: every InvalidArgument
// names the offending events, and a PermissionDenied depends only on the
// tenant and the regarding kind, so a group of several kinds is split per
// kind once.
func (e *emitter) emitGroup(ctx context.Context, items []*item, split bool) *status.Status {
	pending := items
	for len(pending) > 0 {
		// Items are grouped by version, so the first speaks for all.
		req := &eventgatev1.EmitRequest{Events: make([]*eventgatev1.Event, len(pending)), IdempotencyKey: pending[0].version, ClientCounted: e.counted}
		for i, it := range pending {
			req.Events[i] = it.ev
		}
		resp, err := e.client.Emit(ctx, req)
		if err == nil {
			if len(resp.GetResults()) != len(pending) {
				for _, it := range pending {
					it.fail(codes.Internal, "internal error")
				}
				return nil
			}
			for i, it := range pending {
				it.res = resp.GetResults()[i]
			}
			return nil
		}
		st := status.Convert(err)
		switch st.Code() {
		case codes.Unauthenticated, codes.Canceled:
			return st
		case codes.InvalidArgument:
			bad := violationsByIndex(st, len(pending))
			if len(bad) == 0 {
				failAll(pending, st)
				return nil
			}
			rest := pending[:0:0]
			for i, it := range pending {
				vs, ok := bad[i]
				if !ok {
					rest = append(rest, it)
					continue
				}
				for _, v := range vs {
					v.Field = it.field(v.Field)
				}
				it.fail(codes.InvalidArgument, fmt.Sprintf("invalid %s: %s", vs[0].Field, vs[0].Description), vs...)
			}
			pending = rest
		case codes.PermissionDenied:
			kinds := splitByKind(pending)
			if !split || len(kinds) < 2 {
				failAll(pending, st)
				return nil
			}
			for _, sub := range kinds {
				if st := e.emitGroup(ctx, sub, false); st != nil {
					return st
				}
			}
			return nil
		default:
			failAll(pending, st)
			return nil
		}
	}
	return nil
}

func failAll(items []*item, st *status.Status) {
	for _, it := range items {
		msg := st.Message()
		// Emit prefixes a denial with the position in its own batch, which
		// means nothing to the caller.
		if _, after, ok := strings.Cut(msg, "]: "); ok && strings.HasPrefix(msg, "events[") {
			msg = after
		}
		it.fail(st.Code(), msg)
		it.retryAfter = limits.RetryAfterSeconds(st)
	}
}

// violationsByIndex reads the BadRequest details of an InvalidArgument:
// violations of "events[i].rest" keyed by i, with Field set to ".rest".
func violationsByIndex(st *status.Status, n int) map[int][]*eventgatev1.FieldViolation {
	out := map[int][]*eventgatev1.FieldViolation{}
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			rest, ok := strings.CutPrefix(v.GetField(), "events[")
			if !ok {
				continue
			}
			num, rel, ok := strings.Cut(rest, "]")
			if !ok {
				continue
			}
			i, err := strconv.Atoi(num)
			if err != nil || i < 0 || i >= n {
				continue
			}
			out[i] = append(out[i], &eventgatev1.FieldViolation{Field: rel, Description: v.GetDescription()})
		}
	}
	return out
}

// splitByKind groups items by the API group and kind of what they regard,
// in order of first appearance.
func splitByKind(items []*item) [][]*item {
	var order []string
	by := map[string][]*item{}
	for _, it := range items {
		r := it.ev.GetRegarding()
		k := subject.GroupFromAPIVersion(r.GetApiVersion()) + "\x00" + r.GetKind()
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], it)
	}
	out := make([][]*item, len(order))
	for i, k := range order {
		out[i] = by[k]
	}
	return out
}
