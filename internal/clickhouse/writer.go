package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// Writer is the ingest's way into the store: Insert as Store.Insert, with
// each batch built and encoded on a low-priority thread when the embedded
// engine runs with Config.IngestNice (see niceThread). Only for the embedded
// engine: with a server, encoding is the small part of an insert and the
// server's work is not in this process.
type Writer struct {
	s  *Store
	th *niceThread // nil: encode on the caller's goroutine
}

// NewWriter returns a writer into s; Close it when done.
func (s *Store) NewWriter() (*Writer, error) {
	w := &Writer{s: s}
	if n := s.cfg.IngestNice; n > 0 && s.t.kind() == "chdb" {
		th, err := startNiceThread(n)
		if err != nil {
			return nil, fmt.Errorf("clickhouse ingest: %w", err)
		}
		w.th = th
	}
	nice := 0
	if w.th != nil {
		nice = w.th.nice
	}
	s.log.Info("clickhouse writer opened", "encoder_nice", nice)
	return w, nil
}

// Insert stores rows as one INSERT (see Store.Insert).
func (w *Writer) Insert(ctx context.Context, rows []event.Stored) error {
	return w.s.insert(ctx, rows, w.th)
}

// Batch is the batch size and the longest wait for a partial batch the
// store is configured for (Config.BatchSize and BatchWait).
func (w *Writer) Batch() (size int, wait time.Duration) {
	return w.s.cfg.BatchSize, w.s.cfg.BatchWait
}

// Close ends the encoding thread, if any.
func (w *Writer) Close() {
	if w.th != nil {
		w.th.stop()
	}
}

// minuteColumns are the events columns minutes and minute_counts of ms:
// two arrays in step (the analytics view ARRAY JOINs them).
func minuteColumns(ms []wire.Minute) ([]time.Time, []uint32) {
	starts, counts := make([]time.Time, 0, len(ms)), make([]uint32, 0, len(ms))
	for _, m := range ms {
		if m.Count == 0 || m.Start.Before(zeroTime) {
			continue
		}
		starts = append(starts, m.Start.UTC().Truncate(time.Minute))
		counts = append(counts, m.Count)
	}
	return starts, counts
}
