package dedup

import (
	"context"
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// ownerCheckTTL is how long an answer of state.OwnerLeases is reused for
// the same instance: a burst of retries of a dead owner's keys costs one
// query, and an owner that has just died is seen within this much more.
const ownerCheckTTL = 500 * time.Millisecond

// ownersCap bounds the instances remembered; past it the cache starts
// again (instances are a handful).
const ownersCap = 1024

// owners answers whether the instance owning a record is presumed alive,
// through the store's state.OwnerLeases with a short cache. Its zero value
// (no OwnerLeases: a store of one process) says every owner is alive.
type owners struct {
	leases state.OwnerLeases
	self   string
	now    func() time.Time

	mu   sync.Mutex
	seen map[string]*ownerSeen
}

// ownerSeen is one instance's answer, or the read of it in progress.
type ownerSeen struct {
	ready chan struct{} // closed once the read is done
	at    time.Time
	live  bool
	err   error
}

func newOwners(leases state.OwnerLeases, self string, now func() time.Time) *owners {
	return &owners{leases: leases, self: self, now: now, seen: map[string]*ownerSeen{}}
}

// dead reports whether owner's instance is presumed dead. Without
// OwnerLeases, for this instance's own records, and when the check
// fails, it is not: the duplicate waits as for a live owner.
func (w *owners) dead(ctx context.Context, owner string) bool {
	inst := state.OwnerInstance(owner)
	if w.leases == nil || inst == "" || inst == w.self {
		return false
	}
	now := w.now()
	w.mu.Lock()
	s := w.seen[inst]
	if s != nil {
		select {
		case <-s.ready:
			if now.Sub(s.at) >= ownerCheckTTL || s.err != nil {
				s = nil // stale, or failed: read again
			}
		default: // being read by another submit: share its answer
		}
	}
	mine := s == nil
	if mine {
		if len(w.seen) >= ownersCap {
			clear(w.seen)
		}
		s = &ownerSeen{ready: make(chan struct{}), at: now}
		w.seen[inst] = s
	}
	w.mu.Unlock()
	if mine {
		s.live, s.err = w.leases.InstanceLive(ctx, inst)
		close(s.ready)
	} else {
		select {
		case <-s.ready:
		case <-ctx.Done():
			return false
		}
	}
	return s.err == nil && !s.live
}
