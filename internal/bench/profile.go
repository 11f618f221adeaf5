package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Profiler samples the gateway's CPU with Linux perf (the gateway serves no
// pprof endpoint; Go binaries carry their symbols, so perf resolves them).
type Profiler struct {
	cmd  *exec.Cmd
	out  string
	done chan error
}

// StartProfile runs `perf record` on pid, writing to out.
func StartProfile(pid int, out string) (*Profiler, error) {
	cmd := exec.Command("perf", "record", "-F", "199", "-g", "-p", strconv.Itoa(pid), "-o", out)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	p := &Profiler{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// Stop ends the recording and writes the flat and cumulative reports
// (the top lines of `perf report`) next to it, returning the flat one.
func (p *Profiler) Stop() (string, error) {
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		return "", fmt.Errorf("stop perf: %w", err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		return "", fmt.Errorf("perf record did not stop within a minute")
	}
	reports := []struct {
		suffix string
		args   []string
	}{
		{".flat.txt", []string{"--no-children", "--percent-limit", "0.7", "--fields", "overhead,sym"}},
		// The cumulative view lists every caller up the stack: a higher cut.
		{".cum.txt", []string{"--children", "--percent-limit", "1.5", "--fields", "overhead_children,overhead,sym"}},
	}
	var flat string
	for i, r := range reports {
		args := append([]string{"report", "--stdio", "-i", p.out, "--sort", "symbol", "-g", "none"}, r.args...)
		out, err := exec.Command("perf", args...).Output()
		if err != nil {
			return "", fmt.Errorf("perf report: %w", err)
		}
		out = byOverhead(out)
		if err := os.WriteFile(p.out+r.suffix, out, 0o644); err != nil {
			return "", fmt.Errorf("write %s: %w", p.out+r.suffix, err)
		}
		if i == 0 {
			flat = string(bytes.TrimSpace(out))
		}
	}
	return flat, nil
}

// byOverhead keeps the sample lines of a perf report, highest first
// overhead column first, trailing blanks trimmed.
func byOverhead(report []byte) []byte {
	type line struct {
		pct  float64
		text string
	}
	var lines []line
	for _, l := range strings.Split(string(report), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasSuffix(f[0], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		lines = append(lines, line{pct, strings.TrimRight(l, " -")})
	}
	slices.SortStableFunc(lines, func(a, b line) int {
		switch {
		case a.pct > b.pct:
			return -1
		case a.pct < b.pct:
			return 1
		}
		return 0
	})
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l.text + "\n")
	}
	return b.Bytes()
}
