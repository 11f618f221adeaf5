package intake

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// TestCallsQueuedBehindABusyPartitionShareAnEntry holds a partition's
// committer as if two entries awaited their acknowledgement, starts calls
// of one occurrence each (one of them the second of a series, and one
// traced, which keeps an entry of its own), then lets it go: the queued
// occurrences of the untraced calls go to the log as one entry that names
// each call's reply, and every call gets its own decision.
func TestCallsQueuedBehindABusyPartitionShareAnEntry(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	r := startReplica(t, ns, "", "a", cfg)
	ctx := context.Background()

	// Keys of one partition.
	first := occurrence(0, "first")
	p := r.in.Partition(first)
	var keys []int
	for k := 1; len(keys) < 6; k++ {
		if r.in.Partition(occurrence(k, "")) == p {
			keys = append(keys, k)
		}
	}
	if res := submitOne(t, r.in, ctx, first, ""); res.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
		t.Fatalf("first: %+v", res)
	}
	s, err := r.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := info.State.LastSeq

	cm := r.in.commits[p]
	cm.mu.Lock()
	cm.inFlight += maxInFlight
	cm.mu.Unlock()

	type call struct {
		ev   *eventgatev1.Event
		ctx  context.Context
		wait func() ([]Result, error)
	}
	tctx, _ := traced(t, 1)
	calls := []call{{ev: occurrence(0, "second"), ctx: ctx}, {ev: occurrence(keys[0], "traced"), ctx: tctx}}
	for _, k := range keys[1:] {
		calls = append(calls, call{ev: occurrence(k, "alone"), ctx: ctx})
	}
	for i := range calls {
		wait, err := r.in.Start(calls[i].ctx, []*eventgatev1.Event{calls[i].ev}, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		calls[i].wait = wait
	}
	cm.mu.Lock()
	if len(cm.queue) != len(calls) {
		t.Errorf("%d entries queued behind the busy partition, want %d", len(cm.queue), len(calls))
	}
	cm.inFlight -= maxInFlight
	cm.publishLocked()
	cm.mu.Unlock()

	var wg sync.WaitGroup
	results := make([]Result, len(calls))
	for i := range calls {
		wg.Go(func() {
			rs, err := calls[i].wait()
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			results[i] = rs[0]
		})
	}
	wg.Wait()
	if res := results[0]; res.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED || res.SeriesUID != first.Uid {
		t.Errorf("second occurrence of a key: %+v, want SERIES_STARTED of %s", res, first.Uid)
	}
	for i, res := range results[1:] {
		if ev := calls[i+1].ev; res.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || res.UID != ev.Uid || res.ResourceVersion == 0 {
			t.Errorf("call %d: %+v, want CREATED %s with a resourceVersion", i+1, res, ev.Uid)
		}
	}
	// The first call's entry (the traced one after it is not gathered
	// with it), the traced one's (it keeps its trace context), then one
	// for the rest, gathered behind it. (Ticks are not entries of calls.)
	info, err = s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var entries []*jetstream.RawStreamMsg
	for seq := before + 1; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == cfg.subject(p) && m.Header.Get(HeaderTick) == "" {
			entries = append(entries, m)
		}
	}
	if len(entries) != 3 {
		t.Fatalf("%d intake entries for %d calls, want 3 (the first call's, the traced one's, one shared)", len(entries), len(calls))
	}
	shared := entries[2]
	if rs := shared.Header.Get(HeaderReplies); rs == "" || shared.Header.Get(HeaderReply) != "" || shared.Header.Get(HeaderBatch) != "0,0,0,0,0" {
		t.Errorf("shared entry: replies %q, reply %q, batch %q; want the 5 calls' replies in %s only", rs, shared.Header.Get(HeaderReply), shared.Header.Get(HeaderBatch), HeaderReplies)
	}
}

// TestConcurrentCallsAreAllDecided starts many one-occurrence calls at once
// on few partitions, so that they queue and share entries: each gets the
// decision for its own occurrence.
func TestConcurrentCallsAreAllDecided(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	cfg.Partitions = 2
	r := startReplica(t, ns, "", "a", cfg)
	const calls = 400
	evs := make([]*eventgatev1.Event, calls)
	results := make([]Result, calls)
	var wg sync.WaitGroup
	for i := range evs {
		evs[i] = occurrence(1000+i, "concurrent")
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rs, err := r.in.Submit(ctx, evs[i:i+1], nil)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			results[i] = rs[0]
		})
	}
	wg.Wait()
	seqs := make(map[uint64]bool)
	for i, res := range results {
		if res.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || res.UID != evs[i].Uid || res.ResourceVersion == 0 || seqs[res.ResourceVersion] {
			t.Fatalf("call %d: %+v, want CREATED %s with a resourceVersion of its own", i, res, evs[i].Uid)
		}
		seqs[res.ResourceVersion] = true
	}
	if n := streamMsgs(t, r.js, cfg.Stream); n > calls {
		t.Errorf("%d intake entries for %d calls", n, calls)
	}
	t.Logf("%d calls logged in %d intake entries", calls, streamMsgs(t, r.js, cfg.Stream))
}

// replyRuns decodes what message writes and refuses what does not add up.
func TestReplyRuns(t *testing.T) {
	got, err := replyRuns("_INBOX.a.1*2 _INBOX.a.2*1", 3)
	if err != nil || len(got) != 3 || got[0] != "_INBOX.a.1" || got[1] != "_INBOX.a.1" || got[2] != "_INBOX.a.2" {
		t.Fatalf("replyRuns: %v %v", got, err)
	}
	for _, bad := range []string{"_INBOX.a.1*2", "_INBOX.a.1*4", "_INBOX.a.1", "*3", "_INBOX.a.1*0 _INBOX.a.2*3", "_INBOX.a.1*x"} {
		if _, err := replyRuns(bad, 3); err == nil {
			t.Errorf("replyRuns(%q, 3) accepted", bad)
		}
	}
}
