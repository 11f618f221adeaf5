// Command eventgate is the command-line client of an eventgate gateway:
// emit events, watch them live, get, query and count them, as kubectl
// does for a cluster's events.
//
// The server, token and tenant come from flags, else the environment
// (EVENTGATE_SERVER, EVENTGATE_TOKEN, EVENTGATE_TENANT), else the current
// context of a contexts file like a kubeconfig ($EVENTGATE_CONFIG, default
// ~/.config/eventgate/config.yaml).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot(os.Stdout, os.Stderr, os.Getenv).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(1)
	}
}

// errorLine words an error as kubectl does: the server's refusals with
// their reason, an unreachable server with the address to check.
func errorLine(err error) string {
	if errors.Is(err, context.Canceled) {
		return "error: interrupted"
	}
	var cerr *connError
	if errors.As(err, &cerr) {
		return fmt.Sprintf("The connection to the server %s was refused - did you specify the right host or port? (%s)", cerr.server, cerr.cause)
	}
	var serr *serverError
	if errors.As(err, &serr) {
		return fmt.Sprintf("Error from server (%s): %s", serr.reason, serr.message)
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return "error: " + err.Error()
	}
	reason := map[codes.Code]string{
		codes.InvalidArgument:    "BadRequest",
		codes.NotFound:           "NotFound",
		codes.AlreadyExists:      "AlreadyExists",
		codes.PermissionDenied:   "Forbidden",
		codes.Unauthenticated:    "Unauthorized",
		codes.ResourceExhausted:  "TooManyRequests",
		codes.FailedPrecondition: "Conflict",
		codes.OutOfRange:         "Expired",
		codes.Unimplemented:      "MethodNotAllowed",
		codes.Unavailable:        "ServiceUnavailable",
		codes.DeadlineExceeded:   "Timeout",
		codes.Internal:           "InternalError",
	}[st.Code()]
	if reason == "" {
		reason = st.Code().String()
	}
	msg := st.Message()
	if v := fieldViolations(st); v != "" && !strings.Contains(msg, v) {
		msg += ": " + v
	}
	return fmt.Sprintf("Error from server (%s): %s", reason, msg)
}

// connError is a server that could not be reached.
type connError struct {
	server string
	cause  string
}

func (e *connError) Error() string { return "connect to " + e.server + ": " + e.cause }

// asConnError turns "the server is not there" into a connError.
func asConnError(server string, err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "first record does not look like a TLS handshake") {
		return &connError{server: server, cause: "the server does not speak TLS: pass --insecure"}
	}
	if ok && st.Code() == codes.Unavailable && (strings.Contains(st.Message(), "connection refused") || strings.Contains(st.Message(), "no such host") || strings.Contains(st.Message(), "connection error")) {
		return &connError{server: server, cause: st.Message()}
	}
	return err
}

func newRoot(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr, getenv: getenv}
	root := &cobra.Command{
		Use:           "eventgate",
		Short:         "Emit, watch and query events on an eventgate gateway",
		SilenceUsage:  true,
		SilenceErrors: true,
		Long: `eventgate emits, watches, gets, queries and counts the events an eventgate gateway keeps.

The server, token and tenant come from flags, else EVENTGATE_SERVER, EVENTGATE_TOKEN and
EVENTGATE_TENANT, else the current context of the contexts file ($EVENTGATE_CONFIG, default
~/.config/eventgate/config.yaml):

  current-context: dev
  contexts:
  - name: dev
    server: localhost:9090
    insecure: true
    token: ...            # or tokenFile: /path
    tenant: project/shop
    namespace: web
    caFile: ...           # TLS: certFile and keyFile for mutual TLS`,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	g.addFlags(root)
	root.AddCommand(newEmit(g), newWatch(g), newGet(g), newQuery(g), newTop(g), newHistogram(g), newWhoami(g), newConfig(g), newRules(g))
	return root
}
