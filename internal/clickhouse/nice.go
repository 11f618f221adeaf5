package clickhouse

import (
	"context"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
)

// niceThread runs functions one at a time on a dedicated OS thread whose
// Linux nice value is raised, so that the scheduler favours the serving
// path over ingest when the CPUs are saturated. Raising a thread's nice
// value needs no privilege, lowering it back does: the goroutine locks its
// thread and never unlocks it, so when it returns (stop) the runtime ends
// the thread instead of handing a low-priority thread to other goroutines.
// Threads the runtime starts while this one is locked are cloned from a
// clean template thread, so they do not inherit its nice value.
//
// Only Go code should run on it. Threads started from it inherit its nice
// value, and the embedded engine starts its worker threads lazily from the
// thread that calls it (they then serve every query, at that priority),
// while the engine's work for a statement runs on those workers, not on
// the calling thread: calling the engine from here would lower queries,
// not ingest. So a Writer builds and encodes a batch here (the Go
// side of an insert) and calls the engine from its own goroutine; the
// engine lowers its own threads for the insert itself (os_thread_priority,
// chdb.Options.InsertNice).
type niceThread struct {
	nice int
	tid  int
	jobs chan func()
}

// startNiceThread starts the thread and raises its nice value to nice
// (kept when the thread already runs at nice or above).
func startNiceThread(nice int) (*niceThread, error) {
	t := &niceThread{nice: nice, jobs: make(chan func())}
	ready := make(chan error, 1)
	go t.run(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

func (t *niceThread) run(ready chan<- error) {
	runtime.LockOSThread() // never unlocked once the nice value is raised: see niceThread
	if unix.Gettid() == unix.Getpid() {
		// The main thread never exits (the runtime parks it for good
		// when its locked goroutine returns), so it would keep the raised
		// nice value. Start again elsewhere: while this goroutine holds
		// the main thread, the new one gets another thread.
		replaced := make(chan error, 1)
		go t.run(replaced)
		err := <-replaced
		runtime.UnlockOSThread()
		ready <- err
		return
	}
	t.tid = unix.Gettid()
	if _, err := chdb.RaiseNice(t.tid, t.nice); err != nil {
		ready <- fmt.Errorf("clickhouse: ingest thread: %w", err)
		return
	}
	ready <- nil
	for f := range t.jobs {
		f()
	}
}

// do runs f on the thread and returns its error, or ctx.Err() if ctx ends
// before the thread takes f. Once started, f runs to completion.
func (t *niceThread) do(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	select {
	case t.jobs <- func() { done <- f() }:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-done
}

// stop ends the thread once its current job is done. do must not be
// called after stop.
func (t *niceThread) stop() { close(t.jobs) }
