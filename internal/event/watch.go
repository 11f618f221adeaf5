package event

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Watch event types, as Kubernetes names them: the EventService's
// StreamWatch sends them and the Kubernetes Events API passes them on.
const (
	WatchAdded    = "ADDED"
	WatchModified = "MODIFIED"
	WatchBookmark = "BOOKMARK"
)

// WatchEstablishedHeader is the response header a watch sends once it is
// established; an error before it means the watch never started.
const WatchEstablishedHeader = "eventgate-watch-established"

// Errors a watch ends with.
var (
	// ErrTooOld: the stream no longer holds every event after the requested
	// resourceVersion; the client must list again.
	ErrTooOld = errors.New("resourceVersion is too old")
	// ErrFuture: the requested resourceVersion is ahead of the stream.
	ErrFuture = errors.New("resourceVersion is ahead of the stream")
	// ErrWatchStopped: the gateway is shutting down.
	ErrWatchStopped = errors.New("watch feed stopped")
)

// SlowWatcherError ends a watch whose buffer overflowed. Resuming from
// ResumeFrom misses nothing.
type SlowWatcherError struct {
	ResumeFrom uint64
}

func (e *SlowWatcherError) Error() string {
	return fmt.Sprintf("watcher too slow: buffer overflowed; resume from resourceVersion %d", e.ResumeFrom)
}

// WatchItem is one thing a watcher receives: an event with its stream sequence,
// or a bookmark carrying the sequence up to which the watcher is complete.
type WatchItem struct {
	Seq uint64
	// Event is the event, decoded, its ResourceVersion set; shared between
	// watchers: never modify. It is nil for a watcher of Encoded items when
	// no watcher of the event needed it decoded.
	Event *eventgatev1.Event
	// Raw is the event as the stream stores it (its ResourceVersion not in
	// it), when at hand: a watcher can send it on without encoding the
	// event again (see EncodeWatchEvent). Shared: never modify.
	Raw      []byte
	Bookmark bool
	// Trace is the span context of the emit that stored the event, if any.
	Trace trace.SpanContext
	// Stored is when the stream stored the event (the server's clock).
	Stored time.Time
	// Live: the item came from the live feed, not from a replay that
	// catches a resumed watch up.
	Live bool
}

// WatchOptions select what a watch receives.
type WatchOptions struct {
	// Subjects are NATS filter subjects; they must not overlap.
	Subjects []string
	// MatchSubject, when set, is applied in process to the subjects of the
	// events the subjects select, before Match: what a filter subject cannot
	// say about a subject's tokens, without decoding the event.
	MatchSubject func(subject string) bool
	// MatchEncoded, when set, is applied in process to the encoding of the
	// events the subjects select (and MatchSubject passes), before Match;
	// it reads what it needs without decoding (PeekWatchFields, which
	// refuses a malformed encoding).
	MatchEncoded func(raw []byte) bool
	// Match, when set, is applied in process to events the subjects select.
	Match func(*eventgatev1.Event) bool
	// After, when set, resumes after this stream sequence; nil starts live.
	After *uint64
	// Bookmarks is the bookmark interval; 0 sends none.
	Bookmarks time.Duration
	// Buffer bounds the events queued for a slow watcher (default 4096).
	Buffer int
	// Ready, when set, is called once the watch is established: the
	// resourceVersion was accepted and live events are being collected.
	Ready func()
	// Encoded: the watcher sends on WatchItem.Raw and needs no decoded
	// event (without Match, the feed then decodes an event only when
	// another of its watchers needs it).
	Encoded bool
	// Coalesce: the watcher takes its events at most this often, in
	// batches, instead of being woken for each (0: at once). For a
	// watcher that trades this much latency for fewer wake-ups.
	Coalesce time.Duration
}
