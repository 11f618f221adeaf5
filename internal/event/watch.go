package event

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
