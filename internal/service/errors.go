package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/query"
)

// InvalidError is a request that failed validation.
type InvalidError struct {
	Violations []event.Violation
}

func (e *InvalidError) Error() string {
	if len(e.Violations) == 1 {
		return fmt.Sprintf("invalid %s: %s", e.Violations[0].Field, e.Violations[0].Description)
	}
	return fmt.Sprintf("%d invalid fields; first: %s %s", len(e.Violations), e.Violations[0].Field, e.Violations[0].Description)
}

func invalid(field, format string, args ...any) error {
	return &InvalidError{Violations: []event.Violation{{Field: field, Description: fmt.Sprintf(format, args...)}}}
}

// tenantInvalid reports violations of a request's tenant field.
func tenantInvalid(vs []event.Violation) error {
	for i := range vs {
		vs[i].Field = "tenant." + vs[i].Field
	}
	return &InvalidError{Violations: vs}
}

// ErrUnavailable marks a dependency that did not answer.
var ErrUnavailable = errors.New("dependency unavailable")

// toStatus maps an internal error to the gRPC status a caller sees. Internal
// detail is logged here, never sent.
func toStatus(log *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if st, ok := limitStatus(err); ok {
		return st
	}
	var inv *InvalidError
	var slow *event.SlowWatcherError
	switch {
	case errors.As(err, &inv):
		return invalidStatus(inv)
	case errors.As(err, &slow):
		st := status.New(codes.ResourceExhausted, slow.Error())
		if d, e := st.WithDetails(&errdetails.ErrorInfo{
			Reason:   "SLOW_WATCHER",
			Domain:   "eventgate.io",
			Metadata: map[string]string{"resourceVersion": strconv.FormatUint(slow.ResumeFrom, 10)},
		}); e == nil {
			st = d
		}
		return st.Err()
	case errors.Is(err, authz.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, "unauthenticated")
	case errors.Is(err, authz.ErrOverlappingGrants):
		return status.Errorf(codes.FailedPrecondition, "%v: name a tenant or a kind to narrow the watch", err)
	case errors.Is(err, authz.ErrPermissionDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, query.ErrNotFound):
		return status.Error(codes.NotFound, "event not found")
	case errors.Is(err, query.ErrBadPageToken):
		return invalidStatus(&InvalidError{Violations: []event.Violation{{Field: "pageToken", Description: "is not a token this query issued"}}})
	case errors.Is(err, query.ErrInvalidQuery):
		// The store's refusal of the filter as a whole (the service names
		// the field itself where one field is at fault).
		desc := strings.TrimPrefix(err.Error(), query.ErrInvalidQuery.Error()+": ")
		return invalidStatus(&InvalidError{Violations: []event.Violation{{Field: "query", Description: desc}}})
	case errors.Is(err, event.ErrTooOld):
		return status.Errorf(codes.OutOfRange, "%v: list again and watch from the list's resourceVersion", err)
	case errors.Is(err, event.ErrFuture):
		return invalidStatus(&InvalidError{Violations: []event.Violation{{Field: "resourceVersion", Description: err.Error()}}})
	case errors.Is(err, event.ErrWatchStopped):
		return status.Error(codes.Unavailable, "gateway is shutting down; reconnect")
	case errors.Is(err, ErrDraining):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, ErrUnavailable):
		log.Warn("dependency unavailable", "method", method, "err", err)
		return status.Error(codes.Unavailable, "event store unavailable; retry with the same idempotencyKey")
	}
	log.Error("internal error", "method", method, "err", err)
	return status.Error(codes.Internal, "internal error")
}

func invalidStatus(inv *InvalidError) error {
	st := status.New(codes.InvalidArgument, inv.Error())
	br := &errdetails.BadRequest{}
	for _, v := range inv.Violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
	}
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st.Err()
}
