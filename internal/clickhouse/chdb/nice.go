package chdb

import (
	"os"
	"strconv"
	"strings"
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

// reniceLoop keeps the engine's background threads at nice until Close.
func (e *Engine) reniceLoop(nice int) {
	t := time.NewTicker(reniceInterval)
	defer t.Stop()
	for {
		reniceBackground(nice)
		select {
		case <-e.done:
			return
		case <-t.C:
		}
	}
}

// reniceBackground raises the nice value of this process's background
// engine threads to nice where it is lower, and returns how many threads
// it changed.
func reniceBackground(nice int) int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	n := 0
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/self/task/" + task.Name() + "/comm")
		if err != nil || !isBackground(strings.TrimSpace(string(comm))) {
			continue
		}
		// getpriority(2) returns 20 - nice on Linux.
		prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil || 20-prio >= nice {
			continue
		}
		if unix.Setpriority(unix.PRIO_PROCESS, tid, nice) == nil {
			n++
		}
	}
	return n
}

func isBackground(name string) bool {
	for _, p := range BackgroundThreads {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
