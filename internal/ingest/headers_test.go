package ingest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// recordingWriter keeps what ingest inserted.
type recordingWriter struct {
	Writer
	mu   sync.Mutex
	rows map[uint64]event.Stored
}

func (r *recordingWriter) Insert(ctx context.Context, b []event.Stored) error {
	if err := r.Writer.Insert(ctx, b); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, row := range b {
		r.rows[row.Seq] = row
	}
	return nil
}

// TestIngestHeaders: the ingest reads the intake's headers into what it
// stores; a malformed per-minute record loses nothing but the minutes (the
// event is stored, and counts at its event time) and is counted as an
// error.
func TestIngestHeaders(t *testing.T) {
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		n := startNATS(t)
		rw := &recordingWriter{Writer: writer(t, s), rows: map[uint64]event.Stored{}}
		in := startIngest(t, n, rw, testIngestConfig(), nil)
		at := base.Truncate(time.Minute)
		minute := func(d time.Duration) string { return strconv.FormatInt(at.Add(d).Unix()/60, 10) }
		evs := ingestEvents("h", 4)
		headers := []struct{ reason, minutes string }{
			{"created", minute(5*time.Minute) + "=1"},
			{"started", minute(6*time.Minute) + "=1," + minute(7*time.Minute) + "=1"},
			{"client", "garbage"},
			{"", ""},
		}
		msgs := make([]*nats.Msg, len(evs))
		for i, ev := range evs {
			b, err := event.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			msgs[i] = nats.NewMsg(event.SubjectOf(ev))
			msgs[i].Data = b
			if h := headers[i]; h.reason != "" {
				msgs[i].Header.Set(wire.HeaderWriteReason, h.reason)
				msgs[i].Header.Set(wire.HeaderSeriesMinutes, h.minutes)
			}
		}
		seqs := n.publishMsgs(t, msgs...)
		waitFloor(t, in, seqs[len(seqs)-1], 30*time.Second)

		want := [][]wire.Minute{
			{{Start: at.Add(5 * time.Minute), Count: 1}},
			{{Start: at.Add(6 * time.Minute), Count: 1}, {Start: at.Add(7 * time.Minute), Count: 1}},
			nil,
			nil,
		}
		rw.mu.Lock()
		defer rw.mu.Unlock()
		for i, seq := range seqs {
			row, ok := rw.rows[seq]
			if !ok {
				t.Fatalf("seq %d not inserted", seq)
			}
			if row.WriteReason != headers[i].reason || row.Event.GetUid() != evs[i].Uid {
				t.Errorf("seq %d: write reason %q, uid %q; want %q, %q", seq, row.WriteReason, row.Event.GetUid(), headers[i].reason, evs[i].Uid)
			}
			if diff := cmp.Diff(want[i], row.Minutes); diff != "" {
				t.Errorf("seq %d minutes (-want +got)\n%s", seq, diff)
			}
		}
		if got := metricValue(t, in.m.errors.WithLabelValues("minutes")); got != 1 {
			t.Errorf("minutes errors = %v, want 1", got)
		}
		checkExactlyOnce(t, s, seqs[len(seqs)-1], evs, seqs)
	})
}
