package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Storm is one series storm: Series isomorphic keys, each repeated
// Occurrences times, in a tenant of its own.
type Storm struct {
	Tenant      string
	Series      int
	Occurrences int
	Emitted     int
	Accept      float64 // occurrences/s acknowledged
	LastEmit    time.Time
	Outcomes    map[string]int
}

// StormTenant is the tenant of storm run i.
func StormTenant(i int) string { return "storm-" + strconv.Itoa(i) }

// RunStorm emits series × occurrences events on EmitStream: batches of one
// occurrence of every key, StreamInFlight batches unacknowledged.
func RunStorm(ctx context.Context, g *Gateway, tenant string, series, occurrences int) (*Storm, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &Storm{Tenant: tenant, Series: series, Occurrences: occurrences}
	stream, err := g.Events.EmitStream(ctx)
	if err != nil {
		return nil, notBuilt(err)
	}
	var res results
	slots := make(chan struct{}, StreamInFlight)
	recvErr := receiveAcks(stream, notBuilt, func(r *eventgatev1.EmitStreamResponse) {
		res.add(r.Results)
		<-slots
	})
	t := &eventgatev1.Tenant{Type: "project", Name: tenant}
	start := time.Now()
	for i := 0; i < occurrences; i++ {
		select {
		case slots <- struct{}{}:
		case err := <-recvErr:
			return nil, fmt.Errorf("stream ended early: %w", err)
		}
		now := timestamppb.Now()
		evs := make([]*eventgatev1.Event, series)
		for s := range evs {
			name := "crashloop-" + strconv.Itoa(s)
			evs[s] = &eventgatev1.Event{
				EventTime: now, Reason: "BackOff", Type: "Warning", Action: "Restart",
				ReportingController: "kubelet", ReportingInstance: "node-" + strconv.Itoa(s%10),
				Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "storm", Name: name},
				Note:      "Back-off restarting failed container app in pod " + name + ", attempt " + strconv.Itoa(i) + noteTail,
			}
		}
		if err := stream.Send(&eventgatev1.EmitStreamRequest{BatchId: strconv.Itoa(i), Tenant: t, Events: evs}); err != nil {
			return nil, fmt.Errorf("send: %w", err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		return nil, fmt.Errorf("close send: %w", err)
	}
	if err := <-recvErr; err != nil {
		return nil, err
	}
	st.Emitted = res.accepted
	st.LastEmit = res.lastAck
	st.Accept = float64(res.accepted) / res.lastAck.Sub(start).Seconds()
	st.Outcomes = res.outcomes
	return st, nil
}

// StormCounts sums the stored series counts of tenant (every event of it,
// paged) and how many events there are.
func StormCounts(ctx context.Context, g *Gateway, tenant string) (events int, occurrences int64, err error) {
	req := &eventgatev1.QueryRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: tenant}, PageSize: 1000}
	for {
		resp, err := g.Events.Query(ctx, req)
		if err != nil {
			return 0, 0, fmt.Errorf("query %s: %w", tenant, err)
		}
		for _, ev := range resp.Events {
			events++
			occurrences += int64(max(ev.GetSeries().GetCount(), 1))
		}
		if resp.NextPageToken == "" {
			return events, occurrences, nil
		}
		req.PageToken = resp.NextPageToken
	}
}
