package chdb

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// BackgroundThreads are the names (prefixes) of the engine's background
// threads that Options.BackgroundNice lowers: the merge and move executors,
// fetches, the common executor and the schedule pools. The global thread
// pool is not among them: it runs statements (queries as well as inserts).
var BackgroundThreads = []string{"MergeMutate", "Move", "Fetch", "Common", "BgSchPool", "BgDistSchPool", "BgMBSchPool"}

// reniceInterval is how often new background threads are looked for: the
// engine starts them lazily.
const reniceInterval = time.Second

// reniceLoop keeps the engine's background threads at nice, or under
// SCHED_IDLE when idle, until Close. When idle it also takes back to the
// normal policy every other thread found under SCHED_IDLE (restoreIdle).
func (e *Engine) reniceLoop(nice int, idle bool) {
	t := time.NewTicker(reniceInterval)
	defer t.Stop()
	for {
		tendThreads(nice, idle)
		select {
		case <-e.done:
			return
		case <-t.C:
		}
	}
}

// tendThreads is one look at every thread of this process: a background
// engine thread goes under SCHED_IDLE when idle, else to nice; when idle,
// any other thread found under SCHED_IDLE goes back to the normal policy
// (restoreIdle). One pass, each thread's name read once: it runs every
// second, and two passes through /proc (background threads, then idle
// ones), each reading a file per thread with os.ReadFile, were 1% of the
// gateway's CPU under a paced load.
func tendThreads(nice int, idle bool) {
	eachThread(func(tid int, name string) {
		switch background := isBackground(name); {
		case background && idle:
			_, _ = SetIdle(tid)
		case background:
			_, _ = RaiseNice(tid, nice)
		case idle:
			if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
				_ = unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0)
			}
		}
	})
}

// backgroundThreads lists the ids of this process's background engine
// threads (BackgroundThreads).
func backgroundThreads() []int {
	return threads(func(_ int, name string) bool { return isBackground(name) })
}

// threads lists the ids of this process's threads for which keep, given
// a thread's id and name, returns true.
func threads(keep func(tid int, name string) bool) []int {
	var tids []int
	eachThread(func(tid int, name string) {
		if keep(tid, name) {
			tids = append(tids, tid)
		}
	})
	return tids
}

// eachThread calls fn with the id and name of every thread of this
// process. A thread that ends meanwhile is left out.
func eachThread(fn func(tid int, name string)) {
	dir, err := os.Open("/proc/self/task")
	if err != nil {
		return
	}
	tasks, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return
	}
	var path []byte
	var comm [64]byte // a thread's name is at most 15 bytes
	for _, task := range tasks {
		tid, err := strconv.Atoi(task)
		if err != nil {
			continue
		}
		path = append(append(append(path[:0], "/proc/self/task/"...), task...), "/comm"...)
		fd, err := unix.Open(string(path), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		n, err := unix.Read(fd, comm[:])
		unix.Close(fd)
		if err != nil || n <= 0 {
			continue
		}
		fn(tid, strings.TrimSpace(string(comm[:n])))
	}
}

// restoreIdle takes every thread of this process that is under SCHED_IDLE
// but not a background engine thread back to SCHED_NORMAL (SCHED_OTHER,
// nice 0), and returns how many it changed. A thread inherits the policy of
// the thread that starts it, and an engine thread keeps its policy when it
// goes back to the engine's global pool: the background threads of an
// engine closed while the process goes on (its last connection closed)
// return there under SCHED_IDLE, as does a pool thread a background thread
// started. Whatever statement such a thread runs next, an insert or a
// query, then gets the CPU only when nothing else on the machine wants it:
// with the CPUs busy, a test gateway's ingest stalled for more than 30 s
// (TestShutdownWithStalledWatcher beside other tests in CI, and beside four
// CPU-bound processes). Leaving SCHED_IDLE needs CAP_SYS_NICE; without it
// the threads stay as they are (a process that opens its engine once, as
// the gateway does, has none to take back).
func restoreIdle() int {
	n := 0
	for _, tid := range idleThreads() {
		if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0); err == nil {
			n++
		}
	}
	return n
}

// CanLeaveIdle reports whether this process may take a thread out of
// SCHED_IDLE (it has CAP_SYS_NICE), trying it once on a thread of its own
// that then ends. Without it, threads restoreIdle finds stay idle: a
// process that opens and closes engines again and again (a test binary)
// should then not put background threads under SCHED_IDLE at all.
func CanLeaveIdle() bool {
	canLeaveIdle.once.Do(func() {
		ok := make(chan bool)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			tid := unix.Gettid()
			if unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) != nil {
				ok <- false
				return
			}
			ok <- unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0) == nil
		}()
		canLeaveIdle.ok = <-ok
	})
	return canLeaveIdle.ok
}

var canLeaveIdle struct {
	once sync.Once
	ok   bool
}

// idleThreads lists the ids of this process's threads under SCHED_IDLE
// that are not background engine threads (BackgroundThreads).
func idleThreads() []int {
	return threads(func(tid int, name string) bool {
		if isBackground(name) {
			return false
		}
		attr, err := unix.SchedGetAttr(tid, 0)
		return err == nil && attr.Policy == unix.SCHED_IDLE
	})
}

// SetIdle puts Linux thread tid under the SCHED_IDLE policy unless it is
// already, and reports whether it changed it.
func SetIdle(tid int) (bool, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return false, fmt.Errorf("thread %d scheduling policy: %w", tid, err)
	}
	if attr.Policy == unix.SCHED_IDLE {
		return false, nil
	}
	if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0); err != nil {
		return false, fmt.Errorf("thread %d to SCHED_IDLE: %w", tid, err)
	}
	return true, nil
}

// RaiseNice sets Linux thread tid's nice value to nice unless it is
// already at least nice (lowering it would need CAP_SYS_NICE), and reports
// whether it changed it.
func RaiseNice(tid, nice int) (bool, error) {
	// getpriority(2) returns 20 - nice on Linux.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return false, fmt.Errorf("thread %d priority: %w", tid, err)
	}
	if 20-prio >= nice {
		return false, nil
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
		return false, fmt.Errorf("raise thread %d nice value to %d: %w", tid, nice, err)
	}
	return true, nil
}

func isBackground(name string) bool {
	for _, p := range BackgroundThreads {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
