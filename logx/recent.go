package logx

import "time"

// Recent is per-key state kept for the keys seen recently (a source
// address, a system_id), with a bound on how many keys it tracks so that a
// flood of distinct sources cannot grow memory. It backs Limiter and the
// proxy's bind back-off.
//
// An entry ages from its last Touch (a new entry counts as touched at the
// zero time). Once maxKeys-1 keys are tracked, a new key first drops the
// entries untouched for ttl that idle reports as carrying nothing (nil idle:
// all of them); if none can go, the key gets the one shared overflow entry,
// which is never dropped. Entries are kept in the order of their last touch,
// so this costs amortised O(1) per key, not a scan of the map: a drop looks
// only at the oldest entries, and an entry past ttl that idle keeps is set
// aside until it is touched again.
//
// Times passed in must not go backwards. Recent is not safe for concurrent
// use: its owner holds a lock around every call.
type Recent[V any] struct {
	ttl      time.Duration
	limit    int // keys with an entry of their own
	idle     func(*V) bool
	m        map[string]*RecentEntry[V]
	ring     RecentEntry[V] // sentinel: next is the least recently touched aging entry, prev the most
	overflow *RecentEntry[V]
	examined int // entries looked at to drop old ones (tests)
}

// RecentEntry is one key's entry; Value is the owner's state.
type RecentEntry[V any] struct {
	Value V

	key        string
	touched    time.Time
	prev, next *RecentEntry[V]
	aging      bool // in the touch-order list (neither overflow nor set aside)
	overflow   bool
}

// Touched is the time of the entry's last Touch (zero before the first).
func (e *RecentEntry[V]) Touched() time.Time { return e.touched }

// NewRecent returns an empty Recent tracking at most maxKeys entries (at
// least 2, one of them the overflow entry), dropping entries untouched for
// ttl that idle allows to go (nil: any).
func NewRecent[V any](maxKeys int, ttl time.Duration, idle func(*V) bool) *Recent[V] {
	r := &Recent[V]{ttl: ttl, limit: max(maxKeys, 2) - 1, idle: idle, m: make(map[string]*RecentEntry[V])}
	r.ring.prev, r.ring.next = &r.ring, &r.ring
	return r
}

// Len is the number of entries tracked, the overflow entry included.
func (r *Recent[V]) Len() int { return len(r.m) }

// Get returns key's entry, making one (or handing out the overflow entry)
// when key has none.
func (r *Recent[V]) Get(key string, now time.Time) *RecentEntry[V] {
	if e, ok := r.m[key]; ok {
		return e
	}
	if len(r.m) >= r.limit {
		r.dropOld(now)
	}
	if len(r.m) >= r.limit {
		if r.overflow == nil {
			r.overflow = &RecentEntry[V]{key: overflowKey, overflow: true}
			r.m[overflowKey] = r.overflow
		}
		return r.overflow
	}
	e := &RecentEntry[V]{key: key}
	r.m[key] = e
	r.insertAfter(e, &r.ring) // touched at the zero time: the oldest
	return e
}

// Lookup returns the entry a Get of key would return, without making
// one: key's own, the overflow entry when no room is left (nil if none was
// made yet), nil when Get would make a new one.
func (r *Recent[V]) Lookup(key string) *RecentEntry[V] {
	if e, ok := r.m[key]; ok {
		return e
	}
	if len(r.m) >= r.limit {
		return r.overflow
	}
	return nil
}

// Shared reports whether e is the overflow entry, which keys share when
// no room was left for an entry of their own.
func (e *RecentEntry[V]) Shared() bool { return e.overflow }

// Touch marks e used at now: it ages from now.
func (r *Recent[V]) Touch(e *RecentEntry[V], now time.Time) {
	e.touched = now
	if e.overflow {
		return
	}
	if e.aging {
		r.unlink(e)
	}
	r.insertAfter(e, r.ring.prev)
}

// dropOld drops the entries untouched for ttl that idle lets go and sets
// aside those it keeps (a Touch brings them back). It stops at the first
// entry touched within ttl: every later one was touched after it.
func (r *Recent[V]) dropOld(now time.Time) {
	for e := r.ring.next; e != &r.ring; e = r.ring.next {
		r.examined++
		if now.Sub(e.touched) < r.ttl {
			return
		}
		r.unlink(e)
		if r.idle == nil || r.idle(&e.Value) {
			delete(r.m, e.key)
		}
	}
}

func (r *Recent[V]) insertAfter(e, at *RecentEntry[V]) {
	e.prev, e.next, e.aging = at, at.next, true
	at.next.prev = e
	at.next = e
}

func (r *Recent[V]) unlink(e *RecentEntry[V]) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next, e.aging = nil, nil, false
}
