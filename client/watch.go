package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Watch event types.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Bookmark = "BOOKMARK"
)

// WatchEvent is one event of a watch.
type WatchEvent struct {
	// Type is Added, Modified (a series' later version) or Bookmark.
	Type string
	// Event is the event; for a Bookmark only its ResourceVersion is set.
	Event *Event
	// Relisted is set on events found by a re-list: the watch's position
	// had expired (410 Gone) and the store was read from it.
	Relisted bool
}

// WatchOptions tune Watch. The zero value is usable.
type WatchOptions struct {
	// BookmarkInterval asks for a Bookmark this often (at least 1s); zero
	// asks for none.
	BookmarkInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnections
	// (defaults 100ms and 10s).
	MinBackoff, MaxBackoff time.Duration
	// OnReconnect, when set, is called with the error that ended a stream
	// before the watch resumes.
	OnReconnect func(err error)
}

// Watch streams the events req selects, from req.ResourceVersion (empty:
// from now on), until ctx ends or an error that retrying cannot mend
// (invalid request, refused caller), which it yields last. A dropped
// connection or a restarted gateway is resumed from the last
// resourceVersion seen, with no gap and no duplicate; when the gateway no
// longer has that position (410 Gone / OutOfRange), the events after it
// are re-listed from the store, then the watch goes on from the list's
// resourceVersion, as an informer re-lists.
func (c *Client) Watch(ctx context.Context, req *StreamWatchRequest, opts WatchOptions) iter.Seq2[WatchEvent, error] {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(10*time.Second, opts.MinBackoff)
	}
	return func(yield func(WatchEvent, error) bool) {
		req := proto.Clone(req).(*StreamWatchRequest)
		if opts.BookmarkInterval > 0 {
			req.BookmarkInterval = durationpb.New(opts.BookmarkInterval)
		}
		backoff := opts.MinBackoff
		for ctx.Err() == nil {
			err := c.watchOnce(ctx, req, yield, &backoff, opts.MinBackoff)
			if errors.Is(err, errStopped) || ctx.Err() != nil {
				return
			}
			if status.Code(err) == codes.OutOfRange {
				if err := c.relist(ctx, req, yield); err != nil {
					if !errors.Is(err, errStopped) && ctx.Err() == nil {
						yield(WatchEvent{}, err)
					}
					return
				}
				continue
			}
			if !IsRetryable(err) && !errors.Is(err, io.EOF) {
				yield(WatchEvent{}, err)
				return
			}
			if opts.OnReconnect != nil {
				opts.OnReconnect(err)
			}
			t := time.NewTimer(jitter(backoff))
			backoff = min(backoff*2, opts.MaxBackoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// errStopped: the consumer stopped iterating.
var errStopped = errors.New("stopped")

// watchOnce runs one stream; req.ResourceVersion follows what it delivers.
func (c *Client) watchOnce(ctx context.Context, req *StreamWatchRequest, yield func(WatchEvent, error) bool, backoff *time.Duration, minBackoff time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.events.StreamWatch(ctx, req)
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		*backoff = minBackoff
		if rv := resp.GetObject().GetResourceVersion(); rv != "" {
			req.ResourceVersion = rv
		}
		if !yield(WatchEvent{Type: resp.GetType(), Event: resp.GetObject()}, nil) {
			return errStopped
		}
	}
}

// relist reads the events after req.ResourceVersion from the store, oldest
// first, and moves req.ResourceVersion to the list's.
func (c *Client) relist(ctx context.Context, req *StreamWatchRequest, yield func(WatchEvent, error) bool) error {
	after, _ := strconv.ParseUint(req.ResourceVersion, 10, 64)
	q := &QueryRequest{
		Tenant:    req.GetTenant(),
		Namespace: req.GetNamespace(),
		Type:      req.GetTypes(),
		Reason:    req.GetReasons(),
		Order:     OrderOldestFirst,
		PageSize:  1000,
	}
	if req.GetKind() != "" || req.GetName() != "" {
		q.Regarding = &ObjectSelector{Kind: req.GetKind(), Name: req.GetName()}
	}
	q.ReportingController = req.GetReportingControllers()
	var listRV string
	for ev, err := range c.queryPages(ctx, q, func(rv string) { listRV = rv }) {
		if err != nil {
			return err
		}
		if rv, _ := strconv.ParseUint(ev.GetResourceVersion(), 10, 64); rv <= after {
			continue
		}
		if !yield(WatchEvent{Type: Added, Event: ev, Relisted: true}, nil) {
			return errStopped
		}
	}
	if listRV != "" {
		req.ResourceVersion = listRV
	}
	return nil
}
