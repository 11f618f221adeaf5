package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// Gateway is the gateway binary running as a child process on its embedded
// defaults, on loopback ports of its own.
type Gateway struct {
	cmd      *exec.Cmd
	exited   chan error
	DataDir  string
	GRPCAddr string
	HTTPURL  string
	NATSURL  string
	// DebugURL serves the gateway's pprof profiles.
	DebugURL string

	conn      *grpc.ClientConn
	Events    eventgatev1.EventServiceClient
	Analytics eventgatev1.AnalyticsServiceClient
	nc        *nats.Conn
	js        jetstream.JetStream
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// errPortTaken: a port freePort chose was taken before the gateway bound it
// (the bench's own outgoing connections draw their local ports from the
// same range).
var errPortTaken = errors.New("a chosen port was taken before the gateway bound it")

// portAttempts bounds StartGateway's tries when a chosen port is taken.
const portAttempts = 3

// StartGateway runs bin with --data-dir dataDir (every other setting at its
// default, except loopback ports and a NATS listener for the stream
// counts), its output appended to logPath, and waits until /readyz answers
// 200. When the gateway exits because a port chosen for it was taken in
// the meantime, it starts again on new ports, up to portAttempts times.
func StartGateway(ctx context.Context, bin, dataDir, logPath string, extra ...string) (*Gateway, error) {
	for attempt := 1; ; attempt++ {
		g, err := startGateway(ctx, bin, dataDir, logPath, extra...)
		if !errors.Is(err, errPortTaken) || attempt == portAttempts {
			return g, err
		}
	}
}

func startGateway(ctx context.Context, bin, dataDir, logPath string, extra ...string) (*Gateway, error) {
	grpcAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	natsAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	debugAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("gateway log: %w", err)
	}
	logStart, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("gateway log: %w", err)
	}
	args := append([]string{"--data-dir", dataDir, "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--nats-listen", natsAddr, "--debug-addr", debugAddr}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The gateway must not outlive the bench (an interrupted run).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	g := &Gateway{cmd: cmd, exited: make(chan error, 1), DataDir: dataDir, GRPCAddr: grpcAddr,
		HTTPURL: "http://" + httpAddr, NATSURL: "nats://" + natsAddr, DebugURL: "http://" + debugAddr}
	go func() {
		g.exited <- cmd.Wait()
		logf.Close()
	}()
	ready := func() (bool, error) {
		select {
		case err := <-g.exited:
			g.exited <- err
			if portTaken(logPath, logStart) {
				return false, fmt.Errorf("gateway exited before ready (%v): %w; see %s", err, errPortTaken, logPath)
			}
			return false, fmt.Errorf("gateway exited before ready (%v); see %s", err, logPath)
		default:
		}
		resp, err := http.Get(g.HTTPURL + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}
	if err := WaitFor(ctx, 3*time.Minute, ready); err != nil {
		g.Stop()
		return nil, fmt.Errorf("gateway not ready: %w", err)
	}
	if g.conn, err = grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		g.Stop()
		return nil, fmt.Errorf("grpc client: %w", err)
	}
	g.Events = eventgatev1.NewEventServiceClient(g.conn)
	g.Analytics = eventgatev1.NewAnalyticsServiceClient(g.conn)
	if g.nc, err = nats.Connect(g.NATSURL, nats.Name("bench-observer")); err != nil {
		g.Stop()
		return nil, fmt.Errorf("nats: %w", err)
	}
	if g.js, err = jetstream.New(g.nc); err != nil {
		g.Stop()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return g, nil
}

// portTaken reports whether the gateway's log past offset from says that
// a listener could not bind its address.
func portTaken(logPath string, from int64) bool {
	f, err := os.Open(logPath)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, from, 1<<20))
	return err == nil && strings.Contains(string(b), "address already in use")
}

// Conn opens one more gRPC connection to the gateway.
func (g *Gateway) Conn() (*grpc.ClientConn, error) {
	c, err := grpc.NewClient(g.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("grpc client: %w", err)
	}
	return c, nil
}

// Pid is the gateway's process id.
func (g *Gateway) Pid() int { return g.cmd.Process.Pid }

// CPUTime is the CPU time the gateway used so far, user and system (from
// /proc/<pid>/stat, in clock ticks of 10ms).
func (g *Gateway) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(g.Pid()) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("process stat: %w", err)
	}
	// The command name, in parentheses, may hold spaces: count after it.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("process stat: unexpected %q", b)
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("process stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// Memory returns the gateway's peak and current resident set (VmHWM,
// VmRSS) in MiB.
func (g *Gateway) Memory() (peak, now float64, err error) {
	return processMemory(strconv.Itoa(g.Pid()))
}

// processMemory returns the peak and current resident set in MiB of the
// process pid ("self": this one).
func processMemory(pid string) (peak, now float64, err error) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("process status: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", k, err)
		}
		if k == "VmHWM" {
			peak = kb / 1024
		} else {
			now = kb / 1024
		}
	}
	return peak, now, sc.Err()
}

// AckFloor is the resourceVersion Query answers at: the stream sequence up
// to which ClickHouse holds every event. The field selector asks for a
// reason equal to two values, which the service answers from the floor
// alone, without reading ClickHouse.
func (g *Gateway) AckFloor(ctx context.Context) (uint64, error) {
	resp, err := g.Events.Query(ctx, &eventgatev1.QueryRequest{FieldSelector: "reason=a,reason=b", PageSize: 1})
	if err != nil {
		return 0, fmt.Errorf("query: %w", err)
	}
	rv, err := strconv.ParseUint(resp.ResourceVersion, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("query resourceVersion %q: %w", resp.ResourceVersion, err)
	}
	return rv, nil
}

// WaitQueryable waits until Query's resourceVersion reaches rv and returns
// when it saw that.
func (g *Gateway) WaitQueryable(ctx context.Context, rv uint64, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := WaitFor(ctx, timeout, func() (bool, error) {
		f, err := g.AckFloor(ctx)
		at = time.Now()
		return f >= rv, err
	})
	return at, err
}

// StreamState returns the events stream's last sequence and, when filter
// is set, how many messages it holds on subjects matching filter.
func (g *Gateway) StreamState(ctx context.Context, filter string) (last, msgs uint64, err error) {
	s, err := g.js.Stream(ctx, ejs.DefaultConfig().Stream)
	if err != nil {
		return 0, 0, fmt.Errorf("stream: %w", err)
	}
	var opts []jetstream.StreamInfoOpt
	if filter != "" {
		opts = append(opts, jetstream.WithSubjectFilter(filter))
	}
	info, err := s.Info(ctx, opts...)
	if err != nil {
		return 0, 0, fmt.Errorf("stream info: %w", err)
	}
	msgs = info.State.Msgs
	if filter != "" {
		msgs = 0
		for _, n := range info.State.Subjects {
			msgs += n
		}
	}
	return info.State.LastSeq, msgs, nil
}

// Metric reads one unlabelled counter or gauge from /metrics.
func (g *Gateway) Metric(ctx context.Context, name string) (float64, error) {
	v, err := g.Metrics(ctx, name)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// Metrics reads several series from one scrape of /metrics, in the order
// of names (a name with its labels as the exposition writes them). A
// scrape costs the gateway CPU (its collectors query the engine), so
// readers during a measured run take what they need from one.
func (g *Gateway) Metrics(ctx context.Context, names ...string) ([]float64, error) {
	out, err := g.MetricsFound(ctx, names...)
	if err != nil {
		return nil, err
	}
	for i, v := range out {
		if math.IsNaN(v) {
			return nil, fmt.Errorf("metric %s not exported", names[i])
		}
	}
	return out, nil
}

// MetricsFound is Metrics with NaN for the series the scrape does not have
// (a collector that did not answer in time leaves its series out).
func (g *Gateway) MetricsFound(ctx context.Context, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.HTTPURL+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	out := make([]float64, len(names))
	for i := range out {
		out[i] = math.NaN()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for i, name := range names {
			v, ok := strings.CutPrefix(line, name+" ")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return nil, fmt.Errorf("metric %s: %w", name, err)
			}
			out[i] = f
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return out, nil
}

// GCCPU is the processor time the gateway's Go collector has taken so far,
// the runtime's estimate (go_cpu_classes_gc_total_cpu_seconds_total on
// /metrics; updated at the end of each collection).
func (g *Gateway) GCCPU(ctx context.Context) (time.Duration, error) {
	s, err := g.Metric(ctx, "go_cpu_classes_gc_total_cpu_seconds_total")
	return time.Duration(s * float64(time.Second)), err
}

// Stop ends the gateway gracefully (SIGTERM), killing it after a minute.
func (g *Gateway) Stop() error {
	if g.nc != nil {
		g.nc.Close()
	}
	if g.conn != nil {
		g.conn.Close()
	}
	select {
	case err := <-g.exited:
		g.exited <- err
		return nil
	default:
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop gateway: %w", err)
	}
	select {
	case err := <-g.exited:
		g.exited <- err
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return fmt.Errorf("gateway: %w", err)
		}
		return nil
	case <-time.After(time.Minute):
		g.cmd.Process.Kill()
		return errors.New("gateway did not stop within a minute of SIGTERM: killed")
	}
}

// SaveHeapProfile writes the gateway's heap profile to path.
func (g *Gateway) SaveHeapProfile(ctx context.Context, path string) error {
	return g.saveProfile(ctx, "heap", path)
}

// SaveCPUProfile samples the gateway's CPU for d (pprof) and writes the
// profile to path.
func (g *Gateway) SaveCPUProfile(ctx context.Context, d time.Duration, path string) error {
	return g.saveProfile(ctx, "profile?seconds="+strconv.Itoa(int(max(d/time.Second, 1))), path)
}

func (g *Gateway) saveProfile(ctx context.Context, name, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.DebugURL+"/debug/pprof/"+name, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s profile: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s profile: %s", name, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s profile: %w", name, err)
	}
	return f.Close()
}

// CPU is the processor time a process's threads have used.
type CPU struct {
	// Go: the threads the Go runtime runs (named after the binary);
	// Engine: the others, the embedded ClickHouse's (merges, inserts).
	Go, Engine time.Duration
}

// Sub is the CPU used between o and c.
func (c CPU) Sub(o CPU) CPU { return CPU{Go: c.Go - o.Go, Engine: c.Engine - o.Engine} }

// clockTick is the unit of /proc's utime and stime (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// CPU returns the processor time (user and system) of the gateway's
// threads so far, from /proc/<pid>/task/*/stat. Threads that ended are not
// counted, so measure over a window in which the threads live (the
// engine's pools and the runtime's threads do).
func (g *Gateway) CPU() (CPU, error) {
	return processCPU(g.Pid())
}

func processCPU(pid int) (CPU, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return CPU{}, fmt.Errorf("threads: %w", err)
	}
	main, err := threadStat(dir + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return CPU{}, err
	}
	var c CPU
	for _, t := range tasks {
		st, err := threadStat(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		if st.comm == main.comm {
			c.Go += st.cpu
		} else {
			c.Engine += st.cpu
		}
	}
	return c, nil
}

// selfCPU is the CPU time (user and system) this process's threads have
// used, those that ended included.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MachineBusy is the processor time the machine spent busy so far, all
// CPUs together (from /proc/stat: user, nice, system, irq, softirq and
// steal; not idle or iowait).
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: malformed first line %q", line)
	}
	var busy int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
	}
	return time.Duration(busy) * clockTick, nil
}

type taskStat struct {
	comm string
	cpu  time.Duration
}

// threadStat reads a thread's name and its user and system time.
func threadStat(path string) (taskStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return taskStat{}, err
	}
	s := string(b)
	open, shut := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || shut < open {
		return taskStat{}, fmt.Errorf("%s: malformed", path)
	}
	// Fields after the name: state is field 3, utime 14, stime 15.
	f := strings.Fields(s[shut+2:])
	if len(f) < 13 {
		return taskStat{}, fmt.Errorf("%s: malformed", path)
	}
	ut, err1 := strconv.ParseInt(f[14-3], 10, 64)
	st, err2 := strconv.ParseInt(f[15-3], 10, 64)
	if err1 != nil || err2 != nil {
		return taskStat{}, fmt.Errorf("%s: malformed times", path)
	}
	return taskStat{comm: s[open+1 : shut], cpu: time.Duration(ut+st) * clockTick}, nil
}
