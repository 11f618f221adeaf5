package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Tick is the pacing resolution of open-loop load.
const Tick = 10 * time.Millisecond

// Pace calls fn with the number of items due at rate per second, every
// Tick, for d (open loop: a slow fn makes the next call carry more). It
// returns how many items were handed to fn.
func Pace(ctx context.Context, rate int, d time.Duration, fn func(n int) error) (int, error) {
	t := time.NewTicker(Tick)
	defer t.Stop()
	start := time.Now()
	end := start.Add(d)
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case now := <-t.C:
			if now.After(end) {
				return sent, nil
			}
			due := int(float64(rate) * now.Sub(start).Seconds())
			if n := due - sent; n > 0 {
				if err := fn(n); err != nil {
					return sent, err
				}
				sent += n
			}
		}
	}
}

// ErrTimeout is returned by WaitFor when the condition did not hold in time.
var ErrTimeout = errors.New("timed out")

// WaitFor polls cond every millisecond-scale interval until it holds, fails,
// or timeout passes.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	interval := time.Millisecond
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, ErrTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
		interval = min(interval*2, 20*time.Millisecond)
	}
}

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
}

func jsonDecode(b []byte, out any) error {
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode json: %w", err)
	}
	return nil
}
