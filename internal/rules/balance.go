package rules

import (
	"context"
	"encoding/base64"
	"errors"
	"time"
)

// Balance: every replica announces itself in the lease bucket (a key per
// member, expiring with the bucket's TTL unless renewed), and takes no more
// than its fair share of the shards, ceil(shards / members). A replica
// owning more (another one joined) hands the surplus over gracefully, one
// shard at a time, and leaves it to the others for a lease TTL.

// errHandover ends an owner's run to give its shard to another replica.
var errHandover = errors.New("shard handed over to balance the replicas")

func memberKey(replicaID string) string {
	return "member." + base64.RawURLEncoding.EncodeToString([]byte(replicaID))
}

// announce keeps this replica's member key alive and counts the members.
func (e *Engine) announce(ctx context.Context) {
	t := time.NewTicker(e.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, e.cfg.LeaseTTL/3)
		if _, err := e.leases.Put(actx, memberKey(e.cfg.ReplicaID), []byte(e.cfg.ReplicaID)); err == nil {
			if keys, err := e.leases.ListKeysFiltered(actx, "member.*"); err == nil {
				n := 0
				for range keys.Keys() {
					n++
				}
				e.mu.Lock()
				e.members = max(n, 1)
				e.mu.Unlock()
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = e.leases.Delete(dctx, memberKey(e.cfg.ReplicaID))
			cancel()
			return
		case <-t.C:
		}
	}
}

// fairShareLocked is how many shards one replica should own. e.mu is held.
func (e *Engine) fairShareLocked() int {
	m := max(e.members, 1)
	return (e.cfg.Shards + m - 1) / m
}

// mayTake reports whether this replica is below its fair share.
func (e *Engine) mayTake() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.owned)+e.taking < e.fairShareLocked()
}

// shouldRelease reports whether this replica owns more than its fair share
// and the shard is the one to give up (one at a time).
func (e *Engine) shouldRelease(shard int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.releasing[shard] || len(e.owned)-len(e.releasing) <= e.fairShareLocked() {
		return false
	}
	e.releasing[shard] = true
	return true
}
