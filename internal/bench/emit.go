package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Mode is an emit API.
type Mode string

// The emit APIs measured.
const (
	ModeStream Mode = "EmitStream"
	ModeUnary  Mode = "Emit"
	ModeREST   Mode = "REST"
)

// Load shapes of the throughput runs: EmitStream sends batches of
// StreamBatch with StreamInFlight unacknowledged (the gateway pipelines
// up to 64); unary Emit and REST run UnaryCallers concurrent callers with
// UnaryBatch events per call.
const (
	StreamBatch    = 100
	StreamInFlight = 32
	UnaryBatch     = 10
	UnaryCallers   = 32
)

// Throughput is one sustained emit run.
type Throughput struct {
	Accepted  int
	Created   int     // events stored as new (CREATED outcome)
	Accept    float64 // events/s acknowledged
	EndToEnd  float64 // events/s until Query's resourceVersion covered the last one
	MaxRV     uint64
	Drain     time.Duration // from the last ack until queryable
	Outcomes  map[string]int
	LastError string
}

// ErrNotBuilt marks a feature the gateway does not serve.
var ErrNotBuilt = errors.New("not built")

func notBuilt(err error) error {
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	return err
}

// results folds emit results into counters.
type results struct {
	mu       sync.Mutex
	accepted int
	created  int
	maxRV    uint64
	outcomes map[string]int
	lastAck  time.Time
}

func (r *results) add(rs []*eventgatev1.EmitResult) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcomes == nil {
		r.outcomes = map[string]int{}
	}
	r.accepted += len(rs)
	r.lastAck = now
	for _, x := range rs {
		r.outcomes[x.Outcome.String()]++
		if x.Outcome == eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
			r.created++
		}
		if v, err := strconv.ParseUint(x.ResourceVersion, 10, 64); err == nil {
			r.maxRV = max(r.maxRV, v)
		}
	}
}

func maxRV(rs []*eventgatev1.EmitResult) uint64 {
	var m uint64
	for _, x := range rs {
		if v, err := strconv.ParseUint(x.ResourceVersion, 10, 64); err == nil {
			m = max(m, v)
		}
	}
	return m
}

// RunThroughput emits the workload as fast as mode allows for d and then
// waits until everything acknowledged is queryable.
func RunThroughput(ctx context.Context, g *Gateway, mode Mode, w *Workload, d time.Duration) (*Throughput, error) {
	var res results
	start := time.Now()
	var err error
	switch mode {
	case ModeStream:
		err = streamFor(ctx, g, w, d, &res)
	case ModeUnary:
		err = callersFor(ctx, d, func(rng *rand.Rand) error {
			resp, err := g.Events.Emit(ctx, &eventgatev1.EmitRequest{Events: w.Batch(rng, UnaryBatch)})
			if err != nil {
				return notBuilt(err)
			}
			res.add(resp.Results)
			return nil
		})
	case ModeREST:
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: UnaryCallers * 2}}
		defer client.CloseIdleConnections()
		err = callersFor(ctx, d, func(rng *rand.Rand) error {
			rs, err := emitREST(ctx, client, g.HTTPURL, w.Batch(rng, UnaryBatch))
			if err != nil {
				return err
			}
			res.add(rs)
			return nil
		})
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mode, err)
	}
	t := &Throughput{Accepted: res.accepted, Created: res.created, MaxRV: res.maxRV, Outcomes: res.outcomes}
	t.Accept = float64(res.accepted) / res.lastAck.Sub(start).Seconds()
	at, err := g.WaitQueryable(ctx, res.maxRV, 5*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("%s: wait until queryable (rv %d): %w", mode, res.maxRV, err)
	}
	t.Drain = at.Sub(res.lastAck)
	t.EndToEnd = float64(res.accepted) / at.Sub(start).Seconds()
	return t, nil
}

// callersFor runs UnaryCallers closed-loop callers of call for d.
func callersFor(ctx context.Context, d time.Duration, call func(rng *rand.Rand) error) error {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	errs := make(chan error, UnaryCallers)
	for c := 0; c < UnaryCallers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := call(rng); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// streamFor sends workload batches on one EmitStream for d with
// StreamInFlight batches unacknowledged, then waits for every ack.
func streamFor(ctx context.Context, g *Gateway, w *Workload, d time.Duration, res *results) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := g.Events.EmitStream(ctx)
	if err != nil {
		return notBuilt(err)
	}
	slots := make(chan struct{}, StreamInFlight)
	recvErr := receiveAcks(stream, notBuilt, func(r *eventgatev1.EmitStreamResponse) {
		res.add(r.Results)
		<-slots
	})
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		select {
		case slots <- struct{}{}:
		case err := <-recvErr:
			return fmt.Errorf("stream ended early: %w", err)
		}
		req := &eventgatev1.EmitStreamRequest{BatchId: strconv.Itoa(i), Events: w.Batch(rng, StreamBatch)}
		if err := stream.Send(req); err != nil {
			return fmt.Errorf("send: %w (%v)", err, <-recvErr)
		}
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("close send: %w", err)
	}
	return <-recvErr
}

// emitREST posts one batch to POST /v1/events.
func emitREST(ctx context.Context, client *http.Client, base string, evs []*eventgatev1.Event) ([]*eventgatev1.EmitResult, error) {
	body, err := protojson.Marshal(&eventgatev1.EmitRequest{Events: evs})
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/events", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusNotImplemented:
		return nil, fmt.Errorf("%w: POST /v1/events: %s", ErrNotBuilt, resp.Status)
	default:
		return nil, fmt.Errorf("POST /v1/events: %s: %.200s", resp.Status, b)
	}
	var out eventgatev1.EmitResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return out.Results, nil
}

// receiveAcks reads an EmitStream's acknowledgements in a goroutine of its
// own, calling ack with each, until the stream ends: the channel then gets
// nil (the server closed it), the receive error passed through wrap, or the
// first batch refused.
func receiveAcks(stream eventgatev1.EventService_EmitStreamClient, wrap func(error) error, ack func(*eventgatev1.EmitStreamResponse)) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				done <- nil
				return
			}
			if err != nil {
				done <- wrap(err)
				return
			}
			if r.Error != nil {
				done <- fmt.Errorf("batch %s refused: %s", r.BatchId, r.Error.String())
				return
			}
			ack(r)
		}
	}()
	return done
}
