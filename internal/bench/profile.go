package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
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
	var flat string
	for _, children := range []bool{false, true} {
		args := []string{"report", "--stdio", "-i", p.out, "--sort", "symbol", "-g", "none", "--percent-limit", "0.7"}
		name := p.out + ".flat.txt"
		if children {
			args = append(args, "--children")
			name = p.out + ".cum.txt"
		} else {
			args = append(args, "--no-children")
		}
		out, err := exec.Command("perf", args...).Output()
		if err != nil {
			return "", fmt.Errorf("perf report: %w", err)
		}
		if err := os.WriteFile(name, out, 0o644); err != nil {
			return "", fmt.Errorf("write %s: %w", name, err)
		}
		if !children {
			flat = string(bytes.TrimSpace(out))
		}
	}
	return flat, nil
}
