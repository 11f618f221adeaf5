package ingest

import (
	"context"
	"sync"
)

// lifecycle is how an ingest (Consumer or Feed) runs and ends: Stop asks
// its loops to finish the batch in hand, an abort (cancel, or the start
// context ending) ends them at once.
type lifecycle struct {
	stop   chan struct{} // closed by Stop
	cancel context.CancelFunc
	done   chan struct{} // closed once every loop returned
	once   sync.Once
}

// start runs loops until each returns, on a context that ends with an
// abort or when ctx ends.
func (l *lifecycle) start(ctx context.Context, loops ...func(context.Context)) {
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	stopWatch := context.AfterFunc(ctx, cancel)
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Go(func() { loop(runCtx) })
	}
	go func() {
		wg.Wait()
		stopWatch()
		cancel()
		close(l.done)
	}()
}

// Stop ends ingest gracefully: the batch in hand is stored, then ingest
// stops. If ctx ends first (e.g. ClickHouse is down), the batch is
// abandoned — stored again later, by this replica or another — and Stop
// returns ctx.Err().
func (l *lifecycle) Stop(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		l.cancel()
		<-l.done
		return ctx.Err()
	}
}

// Done is closed when ingest has stopped.
func (l *lifecycle) Done() <-chan struct{} { return l.done }

func (l *lifecycle) stopping() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}
