package logx

import (
	"sync"
	"time"
)

// Limiter rate-limits repeated log lines: per key (a source address, an
// upstream, a system_id) it lets one line through per interval and counts
// the lines it held back, so the next line that passes can say how many were
// suppressed ("suppressed", n). Keys are bounded: when maxKeys keys are
// tracked, expired ones are dropped, and if none has expired every further
// key shares one overflow entry, so a flood of distinct sources cannot grow
// memory.
//
// The zero value is not usable; create one with NewLimiter. It is safe for
// concurrent use.
//
// Use it where one misbehaving peer could otherwise write a line per PDU:
//
//	if ok, n := lim.Allow(ip); ok {
//		log.Warn("smppserver: bind failed", "remote", ip, "suppressed", n)
//	}
type Limiter struct {
	interval time.Duration
	maxKeys  int
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*limitEntry
}

type limitEntry struct {
	next       time.Time // when the next line may pass
	suppressed int       // lines held back since the last that passed
}

// overflowKey is the shared entry used once maxKeys keys are tracked.
const overflowKey = "\x00overflow"

// NewLimiter returns a Limiter letting one line per key through per
// interval (at least 1ns), tracking at most maxKeys keys (at least 1). now
// is the clock; nil means time.Now.
func NewLimiter(interval time.Duration, maxKeys int, now func() time.Time) *Limiter {
	if interval <= 0 {
		interval = 1
	}
	if maxKeys < 2 {
		maxKeys = 2
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{interval: interval, maxKeys: maxKeys, now: now, keys: make(map[string]*limitEntry)}
}

// Allow reports whether a line for key may be logged now and, if so, how
// many lines for that key were held back since the last one logged (log it
// as "suppressed" when it is not zero). When it returns false the line is
// counted and must not be logged.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entryLocked(key, now)
	if now.Before(e.next) {
		e.suppressed++
		return false, 0
	}
	suppressed, e.suppressed = e.suppressed, 0
	e.next = now.Add(l.interval)
	return true, suppressed
}

// entryLocked finds or makes key's entry; l.mu is held.
func (l *Limiter) entryLocked(key string, now time.Time) *limitEntry {
	if e, ok := l.keys[key]; ok {
		return e
	}
	limit := l.maxKeys - 1 // one slot is kept for the overflow entry
	if len(l.keys) >= limit {
		for k, e := range l.keys {
			// An entry past its interval with nothing held back carries
			// no information: forget it.
			if k != overflowKey && !now.Before(e.next) && e.suppressed == 0 {
				delete(l.keys, k)
			}
		}
	}
	if len(l.keys) >= limit {
		key = overflowKey
		if e, ok := l.keys[key]; ok {
			return e
		}
	}
	e := &limitEntry{}
	l.keys[key] = e
	return e
}
