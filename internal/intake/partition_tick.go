package intake

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maybeTick puts a tick in the log when a write fell due by the wall clock
// and nothing came to trigger it: at most one in flight, at most one every
// 250ms.
func (pt *partition) maybeTick() {
	due, ok := pt.agg.NextDue()
	if !ok {
		return
	}
	now := time.Now()
	if now.Before(due) || now.Sub(pt.tickAt) < 250*time.Millisecond {
		return
	}
	if pt.tickInFlight && now.Sub(pt.tickAt) < 2*time.Second {
		return
	}
	pt.publishTick()
	pt.tickAt, pt.tickInFlight = now, true
}

// publishTick puts a tick entry in the partition's log; it is lost
// harmlessly if the publish fails. The future is nil then.
func (pt *partition) publishTick() jetstream.PubAckFuture {
	m := nats.NewMsg(pt.subject)
	m.Header.Set(HeaderTick, "1")
	f, err := pt.in.js.PublishMsgAsync(m)
	if err != nil {
		pt.log.Debug("publish tick", "err", err)
		return nil
	}
	pt.in.m.ticks.Inc()
	pt.in.addStats(func(s *Stats) { s.Ticks++ })
	return f
}
