package client

import (
	"context"
	"iter"

	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Query orders.
const (
	OrderNewestFirst = eventgatev1.Order_ORDER_NEWEST_FIRST
	OrderOldestFirst = eventgatev1.Order_ORDER_OLDEST_FIRST
)

// Query yields every event req selects, page after page (keyset pages:
// nothing is skipped or repeated while events arrive). Stop iterating to
// stop reading; an error is yielded last.
func (c *Client) Query(ctx context.Context, req *QueryRequest) iter.Seq2[*Event, error] {
	return c.queryPages(ctx, req, nil)
}

// QueryResourceVersion is like Query and also reports, once the last page
// is read, the resourceVersion a Watch continues from with no gap and no
// duplicate.
func (c *Client) QueryResourceVersion(ctx context.Context, req *QueryRequest, rv *string) iter.Seq2[*Event, error] {
	return c.queryPages(ctx, req, func(v string) { *rv = v })
}

func (c *Client) queryPages(ctx context.Context, req *QueryRequest, listRV func(string)) iter.Seq2[*Event, error] {
	return func(yield func(*Event, error) bool) {
		req := proto.Clone(req).(*QueryRequest)
		first := true
		for {
			cctx, cancel := c.withTimeout(ctx)
			resp, err := c.events.Query(cctx, req)
			cancel()
			if err != nil {
				yield(nil, err)
				return
			}
			if first && listRV != nil {
				// The first page's: every later page is older (or newer)
				// than it, and a watch from it repeats none of them.
				listRV(resp.GetResourceVersion())
			}
			first = false
			for _, ev := range resp.GetEvents() {
				if !yield(ev, nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
}
