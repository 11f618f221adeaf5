package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/query"
)

// threadNice reads thread tid's nice value from /proc (field 19 of stat).
func threadNice(tid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses: state is
	// field 3, nice field 19.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	return strconv.Atoi(f[19-3])
}

// threadsWithNice lists the process's threads whose nice value is n.
func threadsWithNice(t *testing.T, n int) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/self/task/*")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, d := range dirs {
		tid, _ := strconv.Atoi(filepath.Base(d))
		if v, err := threadNice(tid); err == nil && v == n {
			out = append(out, tid)
		}
	}
	return out
}

// encoderTransport records the thread each encode ran on and its nice
// value (read from /proc and with getpriority from that thread).
type encoderTransport struct {
	transport
	mu    sync.Mutex
	tids  map[int]bool
	nices map[int]bool
	errs  []error
}

func (e *encoderTransport) encode(b *eventBatch) error {
	tid := unix.Gettid()
	nice, err := threadNice(tid)
	prio, perr := unix.Getpriority(unix.PRIO_PROCESS, 0) // 0: the calling thread
	e.mu.Lock()
	e.tids[tid] = true
	e.nices[nice] = true
	if err != nil || perr != nil || 20-prio != nice {
		e.errs = append(e.errs, fmt.Errorf("tid %d: /proc nice %d (%v), getpriority nice %d (%v)", tid, nice, err, 20-prio, perr))
	}
	e.mu.Unlock()
	return e.transport.encode(b)
}

// TestWriterNice: with IngestNice set, the writer builds and encodes its
// batches on one thread at that nice value, no other thread of the process
// ends up with it (neither the runtime's nor the engine's), the batches
// reach ClickHouse, and the thread ends when the writer is closed.
func TestWriterNice(t *testing.T) {
	const nice = 7 // not the default, and not a value anything else uses
	cfg := DefaultConfig()
	cfg.Database = chtest.Database(t)
	cfg.IngestNice = nice
	s, err := OpenEngine(context.Background(), chtest.Engine(t), cfg, chtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		chtest.Engine(t).Exec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(cfg.Database))
	})
	if before := threadsWithNice(t, nice); len(before) > 0 {
		t.Fatalf("threads at nice %d before the writer: %v", nice, before)
	}
	<-s.prewarmDone // the store's own first read uses s.t: swap it after
	et := &encoderTransport{transport: s.t, tids: map[int]bool{}, nices: map[int]bool{}}
	s.t = et
	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			w.Close()
		}
	})
	if w.th == nil {
		t.Fatal("no encoder thread")
	}
	tid := w.th.tid
	if got, err := threadNice(tid); err != nil || got != nice {
		t.Fatalf("encoder thread %d: nice %d (%v), want %d", tid, got, err, nice)
	}

	var uids []string
	for b := range 4 {
		rows := make([]Row, 100)
		for i := range rows {
			seq := uint64(b*len(rows) + i + 1)
			ev := mkEvent(fmt.Sprintf("nice-%04d", seq), float64(seq)/100)
			rows[i] = Row{Seq: seq, Subject: event.SubjectOf(ev), Event: ev, StoredAt: time.Now()}
			uids = append(uids, ev.Uid)
		}
		if err := w.Insert(context.Background(), rows); err != nil {
			t.Fatal(err)
		}
	}
	if got := uidsOf(listPage(t, s, query.List{Scope: all, PageSize: query.MaxPageSize, OldestFirst: true}, uint64(len(uids))).Events); !slices.Equal(got, uids) {
		t.Fatalf("stored %d events, want %d", len(got), len(uids))
	}

	et.mu.Lock()
	if len(et.tids) != 1 || !et.tids[tid] || len(et.nices) != 1 || !et.nices[nice] || len(et.errs) > 0 {
		t.Errorf("batches encoded on threads %v at nice values %v, want only thread %d at %d; %v", et.tids, et.nices, tid, nice, et.errs)
	}
	et.mu.Unlock()
	if got := threadsWithNice(t, nice); len(got) != 1 || got[0] != tid {
		t.Errorf("threads at nice %d: %v, want only the encoder %d", nice, got, tid)
	}

	w.Close()
	closed = true
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("encoder thread %d (pid %d) still exists after Close", tid, os.Getpid())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestInsertOnNiceThread: an insert whose encoding runs on the
// low-priority thread stores the rows, and its errors reach the caller:
// an encoding error, the engine's error and the context's.
func TestInsertOnNiceThread(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		th, err := startNiceThread(5)
		if err != nil {
			t.Fatal(err)
		}
		defer th.stop()
		ctx := context.Background()
		ev := mkEvent("n1", 0)
		rows := []Row{{Seq: 1, Subject: event.SubjectOf(ev), Event: ev, StoredAt: time.Now()}}
		if err := s.insert(ctx, rows, th); err != nil {
			t.Fatal(err)
		}
		if got := listPage(t, s, query.List{Scope: all}, 1).Events; len(got) != 1 || got[0].GetUid() != "n1" {
			t.Fatalf("stored %v", got)
		}

		err = s.insert(ctx, []Row{{Seq: 2, Event: ev}, {Seq: 3}}, th)
		if err == nil || !strings.Contains(err.Error(), "row seq 3: no event") {
			t.Errorf("insert without an event: %v", err)
		}

		if err := s.t.exec(ctx, "DROP TABLE "+s.events(), nil); err != nil {
			t.Fatal(err)
		}
		err = s.insert(ctx, rows, th)
		var ce *chdb.Error
		if s.t.kind() == "chdb" && !errors.As(err, &ce) || err == nil {
			t.Errorf("insert into a dropped table: %v", err)
		}

		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.insert(cctx, rows, th); !errors.Is(err, context.Canceled) {
			t.Errorf("insert with a cancelled context: %v", err)
		}
	})
}

// TestWriterNiceOnlyEmbedded: a server's inserts get no encoder thread.
func TestWriterNiceOnlyEmbedded(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		w, err := s.NewWriter()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if got, want := w.th != nil, s.t.kind() == "chdb"; got != want {
			t.Errorf("%s: encoder thread %v, want %v", s.t.kind(), got, want)
		}
	})
}

func TestIngestNiceConfig(t *testing.T) {
	if got := DefaultConfig().IngestNice; got != 10 {
		t.Errorf("default IngestNice %d", got)
	}
	if !DefaultConfig().BackgroundIdle {
		t.Error("default BackgroundIdle false: background merges should run under SCHED_IDLE")
	}
	for _, tc := range []struct {
		nice int
		ok   bool
	}{{0, true}, {1, true}, {19, true}, {-1, false}, {20, false}} {
		cfg := DefaultConfig()
		cfg.IngestNice = tc.nice
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("IngestNice %d: %v", tc.nice, err)
		}
	}
}
