package k8sapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eventgate/eventgate/internal/limits"
)

// statusError is a Kubernetes Status to answer with.
type statusError struct {
	s metav1.Status
}

func (e *statusError) Error() string { return e.s.Message }

func newStatus(code int32, reason metav1.StatusReason, msg string) *statusError {
	return &statusError{s: metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reason,
		Code:     code,
	}}
}

func badRequest(msg string) *statusError {
	return newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, msg)
}
func notFound(msg string) *statusError {
	return newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, msg)
}
func forbidden(msg string) *statusError {
	return newStatus(http.StatusForbidden, metav1.StatusReasonForbidden, msg)
}
func unauthorized(msg string) *statusError {
	return newStatus(http.StatusUnauthorized, metav1.StatusReasonUnauthorized, msg)
}
func methodNotAllowed(msg string) *statusError {
	return newStatus(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, msg)
}
func expired(msg string) *statusError {
	return newStatus(http.StatusGone, metav1.StatusReasonExpired, msg)
}

// invalid is a 422 naming the offending fields.
func invalid(rq request, name string, causes ...metav1.StatusCause) *statusError {
	var msgs []string
	for _, c := range causes {
		msgs = append(msgs, c.Field+": "+c.Message)
	}
	st := newStatus(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		"Event.events.k8s.io \""+name+"\" is invalid: "+strings.Join(msgs, ", "))
	if rq.gv == coreV1 {
		st.s.Message = "Event \"" + name + "\" is invalid: " + strings.Join(msgs, ", ")
	}
	st.s.Details = &metav1.StatusDetails{Name: name, Group: rq.gv.group, Kind: "Event", Causes: causes}
	return st
}

func field(f, msg string) metav1.StatusCause {
	return metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: f, Message: msg}
}

// fromGRPC maps an error of the gRPC API to a Status. rename turns an
// eventgate field path (events[0].regarding.kind) into the caller's.
func fromGRPC(err error, rq request, name string, rename func(string) string) *statusError {
	st := status.Convert(err)
	msg := st.Message()
	var out *statusError
	switch st.Code() {
	case codes.InvalidArgument:
		var causes []metav1.StatusCause
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					f := v.GetField()
					if rename != nil {
						f = rename(f)
					}
					causes = append(causes, field(f, v.GetDescription()))
				}
			}
		}
		if rename != nil && len(causes) > 0 {
			return invalid(rq, name, causes...)
		}
		out = badRequest(msg)
		if len(causes) > 0 {
			out.s.Details = &metav1.StatusDetails{Causes: causes}
		}
	case codes.NotFound:
		out = notFound(`events "` + name + `" not found`)
		out.s.Details = &metav1.StatusDetails{Name: name, Group: rq.gv.group, Kind: "events"}
	case codes.PermissionDenied:
		out = forbidden(msg)
	case codes.Unauthenticated:
		out = unauthorized(msg)
	case codes.OutOfRange:
		out = expired("too old resource version: " + msg)
	case codes.FailedPrecondition:
		out = badRequest(msg)
	case codes.ResourceExhausted:
		// As kube-apiserver answers a rate limit: client-go's REST client
		// waits Retry-After and sends the request again.
		out = newStatus(http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, msg)
		if s := limits.RetryAfterSeconds(st); s > 0 {
			out.s.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(s)}
		}
	case codes.Unavailable:
		out = newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, msg)
	case codes.DeadlineExceeded:
		out = newStatus(http.StatusGatewayTimeout, metav1.StatusReasonTimeout, msg)
	case codes.Canceled:
		out = newStatus(499, metav1.StatusReasonUnknown, msg)
	default:
		out = newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "internal error")
	}
	return out
}

// writeStatus answers with a Status body.
func writeStatus(w http.ResponseWriter, st *statusError) {
	b, err := json.Marshal(st.s)
	if err != nil {
		b = []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"internal error","reason":"InternalError","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if d := st.s.Details; d != nil && d.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(d.RetryAfterSeconds)))
	}
	w.WriteHeader(int(st.s.Code))
	_, _ = w.Write(append(b, '\n'))
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, code int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "encoding the response failed"))
		return
	}
	if contentType == "" {
		contentType = "application/json"
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
