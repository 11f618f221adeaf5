package chdb

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// backgroundNices returns the nice value of every background engine thread
// of this process.
func backgroundNices(t *testing.T) map[int]int {
	t.Helper()
	nices := map[int]int{}
	for _, tid := range backgroundThreads() {
		prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue // the thread ended
		}
		nices[tid] = 20 - prio
	}
	return nices
}

// TestThreadPriorities: with BackgroundNice, every background engine thread
// (merges, moves, schedulers) ends up at that nice value; with InsertNice,
// InsertFile statements, materialized views included, run with
// os_thread_priority set to it.
func TestThreadPriorities(t *testing.T) {
	engine(t)
	e, err := Open(Options{DataDir: testDataDir, PoolSize: 1, InsertNice: 9, BackgroundNice: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()

	mustExec(t, e, "CREATE TABLE prio_in (id UInt64) ENGINE = Null")
	defer mustExec(t, e, "DROP TABLE prio_in")
	mustExec(t, e, "CREATE TABLE prio_out (id UInt64, prio Int64) ENGINE = MergeTree ORDER BY id")
	defer mustExec(t, e, "DROP TABLE prio_out")
	mustExec(t, e, "CREATE MATERIALIZED VIEW prio_mv TO prio_out AS SELECT id, toInt64(getSetting('os_thread_priority')) AS prio FROM prio_in")
	defer mustExec(t, e, "DROP VIEW prio_mv")
	for i := range 3 { // parts to merge: background threads at work
		if err := e.InsertFile(ctx, "prio_in", nil, "JSONEachRow", []byte(`{"id":`+strconv.Itoa(i)+`}`+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	out, err := e.Query(ctx, "SELECT groupUniqArray(prio), count() FROM prio_out", "TSV")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "[9]\t3" {
		t.Errorf("os_thread_priority seen by the inserts' view: %q, want [9] for all 3 rows", got)
	}
	// A query is not an insert: it keeps the default.
	if out, err := e.Query(ctx, "SELECT getSetting('os_thread_priority')", "TSV"); err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("os_thread_priority of a query: %q, %v; want 0", out, err)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		nices := backgroundNices(t)
		low := 0
		for _, n := range nices {
			if n < 7 {
				low++
			}
		}
		if len(nices) > 0 && low == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background threads (tid: nice) %v: want all at nice 7 or above", nices)
		}
		time.Sleep(reniceInterval / 4)
	}
}

// backgroundPolicies returns the scheduling policy of every background
// engine thread of this process.
func backgroundPolicies(t *testing.T) map[int]uint32 {
	t.Helper()
	policies := map[int]uint32{}
	for _, tid := range backgroundThreads() {
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			continue // the thread ended
		}
		policies[tid] = attr.Policy
	}
	return policies
}

// TestBackgroundThreadsIdle: with BackgroundIdle, every background engine
// thread (merges, moves, schedulers) ends up under SCHED_IDLE, and the
// statements' threads do not: a query still runs at the normal policy.
func TestBackgroundThreadsIdle(t *testing.T) {
	engine(t)
	e, err := Open(Options{DataDir: testDataDir, PoolSize: 1, BackgroundIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()

	mustExec(t, e, "CREATE TABLE idle_out (id UInt64) ENGINE = MergeTree ORDER BY id")
	defer mustExec(t, e, "DROP TABLE idle_out")
	for i := range 3 { // parts to merge: background threads at work
		if err := e.InsertFile(ctx, "idle_out", nil, "JSONEachRow", []byte(`{"id":`+strconv.Itoa(i)+`}`+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		policies := backgroundPolicies(t)
		other := 0
		for _, p := range policies {
			if p != unix.SCHED_IDLE {
				other++
			}
		}
		if len(policies) > 0 && other == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background threads (tid: policy) %v: want all under SCHED_IDLE (%d)", policies, unix.SCHED_IDLE)
		}
		time.Sleep(reniceInterval / 4)
	}
	// Nothing else is: the Go runtime's threads and the statements' pool.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		comm, err := os.ReadFile("/proc/self/task/" + task.Name() + "/comm")
		if err != nil || isBackground(strings.TrimSpace(string(comm))) {
			continue
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
			t.Errorf("thread %d (%s) is under SCHED_IDLE: only background threads should be", tid, strings.TrimSpace(string(comm)))
		}
	}
}

// TestIdlePolicyTakenBackFromStatementThreads: a thread under SCHED_IDLE
// that is not a background engine thread (a pool thread an earlier
// engine's background threads left there, which would run statements at
// the idle policy) is taken back to the normal policy while an engine with
// BackgroundIdle is open.
func TestIdlePolicyTakenBackFromStatementThreads(t *testing.T) {
	engine(t)
	if !CanLeaveIdle() {
		t.Skip("leaving SCHED_IDLE needs CAP_SYS_NICE, which this process lacks: leaked threads stay idle")
	}
	e, err := Open(Options{DataDir: testDataDir, PoolSize: 1, BackgroundIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	policy := make(chan uint32)
	release := make(chan struct{})
	defer close(release)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		tid := unix.Gettid()
		if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0); err != nil {
			t.Error(err)
			close(policy)
			return
		}
		for {
			attr, err := unix.SchedGetAttr(tid, 0)
			if err != nil {
				t.Error(err)
				close(policy)
				return
			}
			select {
			case policy <- attr.Policy:
			case <-release:
				return
			}
		}
	}()
	deadline := time.Now().Add(5 * reniceInterval)
	for p := range policy {
		if p == unix.SCHED_NORMAL {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a statement thread under SCHED_IDLE is still at policy %d after %v, want SCHED_NORMAL (%d)", p, 5*reniceInterval, unix.SCHED_NORMAL)
		}
		time.Sleep(reniceInterval / 10)
	}
}
