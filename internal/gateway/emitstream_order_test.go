package gateway

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// emitStreamBatches sends batches on one EmitStream, closes it and returns the
// acks, in order.
func emitStreamBatches(t *testing.T, tg *testGateway, batches []*eventgatev1.EmitStreamRequest) []*eventgatev1.EmitStreamResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := tg.client.EmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if err := s.Send(b); err != nil {
			t.Fatalf("send %s: %v", b.BatchId, err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var acks []*eventgatev1.EmitStreamResponse
	for {
		a, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream ended with %v after %d acks", err, len(acks))
		}
		acks = append(acks, a)
	}
	if len(acks) != len(batches) {
		t.Fatalf("%d acks for %d batches", len(acks), len(batches))
	}
	return acks
}

// TestEmitStreamFoldsInBatchOrder: isomorphic events sent one per
// batch on one EmitStream are folded in the order they were sent ("Order is
// kept per series key"): the first batch's event is the one stored
// (CREATED, its note kept), the second starts the series, the rest count.
// The batches were submitted concurrently, so a later batch was often
// stored first: its ack said CREATED and the first batch's SERIES_STARTED,
// and the stored event carried the last batch's note.
func TestEmitStreamFoldsInBatchOrder(t *testing.T) {
	tg := startGateway(t, nil)
	for round := 0; round < 3; round++ {
		name := fmt.Sprint("ord-", round)
		var batches []*eventgatev1.EmitStreamRequest
		for i := 0; i < 6; i++ {
			ev := testEvent("Ordered", "Pod", "ns", name)
			ev.Note = fmt.Sprint("occurrence ", i)
			batches = append(batches, &eventgatev1.EmitStreamRequest{BatchId: fmt.Sprint(i), Events: []*eventgatev1.Event{ev}})
		}
		acks := emitStreamBatches(t, tg, batches)
		var got []string
		for _, a := range acks {
			if a.Error != nil || len(a.Results) != 1 {
				t.Fatalf("round %d: ack %v", round, a)
			}
			got = append(got, strings.TrimPrefix(a.Results[0].Outcome.String(), "EMIT_OUTCOME_"))
		}
		want := "CREATED SERIES_STARTED SERIES_COUNTED SERIES_COUNTED SERIES_COUNTED SERIES_COUNTED"
		if strings.Join(got, " ") != want {
			t.Errorf("round %d: outcomes of batches 0..5 %v, want %s", round, got, want)
		}
		// The stored event is the first occurrence.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "0", Kind: "Pod", Name: name})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		first := recvN(t, w, 1)[0]
		cancel()
		if first.Type != "ADDED" || first.Object.Note != "occurrence 0" {
			t.Errorf("round %d: first stored version is %s with note %q, want ADDED with %q", round, first.Type, first.Object.Note, "occurrence 0")
		}
	}
}

// TestEmitStreamRetryInNextBatchIsDuplicate: an event resent with its uid in the
// next batch of the same EmitStream (a retry before the first ack came) is
// stored once; the first batch's ack is CREATED and the retry's DUPLICATE
// with the stored event's name and resourceVersion (README, "Idempotent
// retries"). The first batch was often answered DUPLICATE, with neither a
// name nor a resourceVersion, and the retry CREATED.
func TestEmitStreamRetryInNextBatchIsDuplicate(t *testing.T) {
	tg := startGateway(t, nil)
	for round := 0; round < 3; round++ {
		ev := func() *eventgatev1.Event {
			e := testEvent("Retried", "Pod", "ns", fmt.Sprint("retry-", round))
			e.Uid = fmt.Sprint("retry-uid-", round)
			return e
		}
		acks := emitStreamBatches(t, tg, []*eventgatev1.EmitStreamRequest{
			{BatchId: "first", Events: []*eventgatev1.Event{ev()}},
			{BatchId: "retry", Events: []*eventgatev1.Event{ev()}},
		})
		f, r := acks[0].GetResults(), acks[1].GetResults()
		if len(f) != 1 || len(r) != 1 {
			t.Fatalf("round %d: acks %v", round, acks)
		}
		if f[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || f[0].ResourceVersion == "" {
			t.Errorf("round %d: first batch %v, want CREATED with a resourceVersion", round, f[0])
		}
		if r[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE || r[0].Name == "" || r[0].ResourceVersion == "" {
			t.Errorf("round %d: retry %v, want DUPLICATE naming the stored event and its resourceVersion", round, r[0])
		} else if r[0].ResourceVersion != f[0].ResourceVersion || r[0].Name != f[0].Name {
			t.Errorf("round %d: retry %v names another event than the first %v", round, r[0], f[0])
		}
	}
}
