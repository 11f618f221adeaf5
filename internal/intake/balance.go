package intake

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

// members tracks the live replicas of an intake, so that each can aim at
// its fair share of the partitions: every replica announces itself on a
// core NATS subject every interval and counts those heard from lately.
// Ownership itself never depends on it (the pin does): it only decides who
// competes for a partition and who hands one over.
type members struct {
	id       string
	subject  string
	interval time.Duration

	mu   sync.Mutex
	seen map[string]time.Time

	owned       atomic.Int32
	lastRelease atomic.Int64 // unix ns of the last handover to rebalance
}

func newMembers(stream string, interval time.Duration) *members {
	return &members{
		id:       uuid.NewString(),
		subject:  "_EVENTGATE.intake." + stream + ".members",
		interval: interval,
		seen:     make(map[string]time.Time),
	}
}

// byePrefix marks the announcement of a replica that is stopping.
const byePrefix = "bye "

func (m *members) onAnnounce(msg *nats.Msg) {
	id, bye := strings.CutPrefix(string(msg.Data), byePrefix)
	if id == m.id {
		return
	}
	m.mu.Lock()
	if bye {
		delete(m.seen, id)
	} else {
		m.seen[id] = time.Now()
	}
	m.mu.Unlock()
}

// leave tells the other replicas that this one is stopping, so that they
// compete for the partitions it hands over at once.
func (m *members) leave(nc *nats.Conn) {
	_ = nc.Publish(m.subject, []byte(byePrefix+m.id))
}

// announce publishes this replica's id every interval until ctx ends.
func (m *members) announce(ctx context.Context, nc *nats.Conn) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		_ = nc.Publish(m.subject, []byte(m.id))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// count is the number of live replicas, this one included.
func (m *members) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 1
	for id, at := range m.seen {
		if time.Since(at) > 3*m.interval {
			delete(m.seen, id)
			continue
		}
		n++
	}
	return n
}

// fairShare is how many of partitions this replica should own.
func (m *members) fairShare(partitions int) int {
	n := m.count()
	return (partitions + n - 1) / n
}

// mayRelease reports whether this replica, owning more than its share,
// may hand one partition over now: at most one every every.
func (m *members) mayRelease(every time.Duration) bool {
	now := time.Now().UnixNano()
	last := m.lastRelease.Load()
	return now-last >= int64(every) && m.lastRelease.CompareAndSwap(last, now)
}
