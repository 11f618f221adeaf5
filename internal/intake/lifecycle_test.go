package intake

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/series"
)

// traced returns a context carrying a sampled remote span, and the
// traceparent header it propagates as.
func traced(t *testing.T, n byte) (context.Context, string) {
	t.Helper()
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, n}
	sid := trace.SpanID{1, 2, 3, 4, 5, 6, 7, n}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithSpanContext(context.Background(), sc), "00-" + tid.String() + "-" + sid.String() + "-01"
}

func submitOne(t *testing.T, in *Intake, ctx context.Context, ev *eventgatev1.Event, id string) Result {
	t.Helper()
	var ids []string
	if id != "" {
		ids = []string{id}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	rs, err := in.Submit(ctx, []*eventgatev1.Event{ev}, ids)
	if err != nil {
		t.Fatal(err)
	}
	return rs[0]
}

// TestLifecycle follows one series through NATS on one replica: singleton,
// started, counted, flushed, finished; then a new singleton for the same
// key, an event its emitter aggregated, and a retried message id.
func TestLifecycle(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	cfg.Series = series.Config{Window: 2 * time.Second, FinishAfter: 2 * time.Second, FlushInterval: 500 * time.Millisecond, Heartbeat: time.Second}
	r := startReplica(t, ns, "", "a", cfg)

	ctx1, tp1 := traced(t, 1)
	ev1 := occurrence(7, "first")
	r1 := submitOne(t, r.in, ctx1, ev1, "")
	if r1.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || r1.UID != ev1.Uid || r1.SeriesUID != "" || r1.ResourceVersion == 0 {
		t.Fatalf("first occurrence: %+v, want CREATED %s with a resourceVersion", r1, ev1.Uid)
	}
	ctx2, tp2 := traced(t, 2)
	r2 := submitOne(t, r.in, ctx2, occurrence(7, "second"), "")
	if r2.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED || r2.UID != ev1.Uid || r2.SeriesUID != ev1.Uid || r2.ResourceVersion <= r1.ResourceVersion {
		t.Fatalf("second occurrence: %+v, want SERIES_STARTED of %s after rv %d", r2, ev1.Uid, r1.ResourceVersion)
	}
	r3 := submitOne(t, r.in, context.Background(), occurrence(7, "third"), "")
	if r3.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED || r3.UID != ev1.Uid || r3.SeriesUID != ev1.Uid || r3.ResourceVersion != 0 {
		t.Fatalf("third occurrence: %+v, want SERIES_COUNTED into %s", r3, ev1.Uid)
	}

	var vs []stored
	waitFor(t, 20*time.Second, "the series to finish", func() bool {
		vs = readEvents(t, r.js)[ev1.Uid]
		return len(vs) > 0 && vs[len(vs)-1].ev.GetSeries().GetState() == series.StateFinished
	})
	reason := func(v stored) string { return v.hdr.Get(wire.HeaderWriteReason) }
	if v := vs[0]; v.seq != r1.ResourceVersion || reason(v) != "created" || v.ev.Series != nil || v.ev.Note != "first" ||
		traceparentOf(v) != tp1 || v.hdr.Get(wire.HeaderSeriesMinutes) == "" {
		t.Errorf("version 1: seq %d reason %q series %v note %q traceparent %q minutes %q", v.seq, reason(v), v.ev.Series, v.ev.Note, traceparentOf(v), v.hdr.Get(wire.HeaderSeriesMinutes))
	}
	if v := vs[1]; v.seq != r2.ResourceVersion || reason(v) != "started" || v.ev.GetSeries().GetCount() != 2 ||
		v.ev.GetSeries().GetState() != series.StateOngoing || v.ev.Note != "second" || traceparentOf(v) != tp2 {
		t.Errorf("version 2: seq %d reason %q series %v note %q traceparent %q", v.seq, reason(v), v.ev.Series, v.ev.Note, traceparentOf(v))
	}
	sawFlush := false
	for _, v := range vs[2 : len(vs)-1] {
		if reason(v) != "flush" && reason(v) != "heartbeat" || v.ev.GetSeries().GetState() != series.StateOngoing || traceparentOf(v) != "" {
			t.Errorf("version at %d: reason %q series %v traceparent %q", v.seq, reason(v), v.ev.Series, traceparentOf(v))
		}
		if reason(v) == "flush" && v.ev.GetSeries().GetCount() == 3 && v.ev.Note == "third" {
			sawFlush = true
		}
	}
	if !sawFlush {
		t.Errorf("no flush of count 3 among %d versions", len(vs))
	}
	last := vs[len(vs)-1]
	if reason(last) != "finished" || last.ev.GetSeries().GetCount() != 3 || last.ev.Uid != ev1.Uid || last.ev.Name != ev1.Name {
		t.Errorf("last version: reason %q series %v uid %s", reason(last), last.ev.Series, last.ev.Uid)
	}
	if got := minutesSum(t, vs); got != 3 {
		t.Errorf("minutes add up to %d, want 3", got)
	}

	// The series is over: the next isomorphic event is a new singleton.
	ev4 := occurrence(7, "again")
	if r4 := submitOne(t, r.in, context.Background(), ev4, ""); r4.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || r4.UID != ev4.Uid {
		t.Errorf("occurrence after the finish: %+v, want CREATED %s", r4, ev4.Uid)
	}

	// An event its emitter aggregated is stored as it is.
	ev5 := occurrence(8, "aggregated by the client")
	ev5.Series = &eventgatev1.EventSeries{Count: 5, State: series.StateOngoing}
	r5 := submitOne(t, r.in, context.Background(), ev5, "")
	if r5.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || r5.UID != ev5.Uid || r5.ResourceVersion == 0 {
		t.Fatalf("client series: %+v", r5)
	}
	if v := readEvents(t, r.js)[ev5.Uid]; len(v) != 1 || v[0].seq != r5.ResourceVersion || v[0].ev.GetSeries().GetCount() != 5 || reason(v[0]) != wire.ReasonClient {
		t.Errorf("client series stored as %+v", v)
	}

	// A retried message id is logged once.
	ev6 := occurrence(9, "retried")
	if r6 := submitOne(t, r.in, context.Background(), ev6, "retry-1"); r6.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
		t.Errorf("first try: %+v", r6)
	}
	if r6 := submitOne(t, r.in, context.Background(), ev6, "retry-1"); r6.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE || r6.UID != ev6.Uid {
		t.Errorf("retry: %+v, want DUPLICATE", r6)
	}
	if v := readEvents(t, r.js)[ev6.Uid]; len(v) != 1 {
		t.Errorf("retried event stored %d times", len(v))
	}

	var st Stats
	waitFor(t, 5*time.Second, "stats", func() bool { st = r.in.Stats(); return st.Occurrences == 5 })
	if st.Occurrences != 5 || st.Folded != 1 || st.Writes[series.ReasonCreated] != 3 || st.Writes[series.ReasonStarted] != 1 ||
		st.Writes[series.ReasonFinished] != 1 || st.ClientWrites != 1 || st.Takeovers == 0 {
		t.Errorf("stats: %+v", st)
	}
}

func traceparentOf(v stored) string {
	return propagation.HeaderCarrier(v.hdr).Get("traceparent")
}
