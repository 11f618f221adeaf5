package limits

import (
	"math"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// RetryAfterSeconds is the HTTP Retry-After of a refusal: the RetryInfo
// delay of st in whole seconds, rounded up (at least 1), or 0 when st
// carries none.
func RetryAfterSeconds(st *status.Status) int {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(1, int(math.Ceil(ri.GetRetryDelay().AsDuration().Seconds())))
		}
	}
	return 0
}
