package bench

import (
	"os"
	"testing"
	"time"
)

// TestProcessCPUCountsTheGoThreads: CPU work done by this (Go) process
// shows as Go time, none of it as the engine's.
func TestProcessCPUCountsTheGoThreads(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		for i := 0; i < 1000; i++ {
			x ^= i
		}
	}
	after, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	used := after.Sub(before)
	if used.Go < 100*time.Millisecond {
		t.Errorf("Go threads used %v over 300 ms of work, want at least 100 ms (x=%d)", used.Go, x)
	}
	if used.Engine != 0 {
		t.Errorf("engine threads used %v in a process without the engine", used.Engine)
	}
}

// TestMachineBusyCountsThisProcessesWork: 300 ms of work on one core shows
// in the machine's busy time, and so does it in the process's own.
func TestMachineBusyCountsThisProcessesWork(t *testing.T) {
	m0, err := MachineBusy()
	if err != nil {
		t.Fatal(err)
	}
	s0 := selfCPU()
	x := 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		for i := 0; i < 1000; i++ {
			x ^= i
		}
	}
	m1, err := MachineBusy()
	if err != nil {
		t.Fatal(err)
	}
	if d := m1 - m0; d < 100*time.Millisecond {
		t.Errorf("machine busy %v over 300 ms of work, want at least 100 ms (x=%d)", d, x)
	}
	if d := selfCPU() - s0; d < 100*time.Millisecond {
		t.Errorf("process CPU %v over 300 ms of work, want at least 100 ms", d)
	}
}
