package gateway

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// logTailLines is how many of a test gateway's last log lines a failed
// test prints.
const logTailLines = 300

// logTail keeps the last lines written to it: a test gateway logs into
// one, and a test that fails prints it, so that a failure seen only in CI
// comes with what the gateway said before it.
type logTail struct {
	mu    sync.Mutex
	lines [][]byte
	next  int
	full  bool
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lines == nil {
		l.lines = make([][]byte, logTailLines)
	}
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		l.lines[l.next] = append(l.lines[l.next][:0], line...)
		if l.next++; l.next == len(l.lines) {
			l.next, l.full = 0, true
		}
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	if l.full {
		for _, line := range l.lines[l.next:] {
			b.Write(line)
		}
	}
	for _, line := range l.lines[:l.next] {
		b.Write(line)
	}
	return b.String()
}

// testLogger is a logger for a test gateway named name: what it logs at
// Info and above is printed if the test fails.
func testLogger(t testing.TB, name string) *slog.Logger {
	tail := &logTail{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last %d lines the gateway %s logged:\n%s", logTailLines, name, tail)
		}
	})
	return slog.New(slog.NewTextHandler(tail, nil))
}
