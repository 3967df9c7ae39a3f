package logx

import (
	"context"
	"log/slog"
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
	now      func() time.Time

	mu   sync.Mutex
	keys *Recent[limitEntry] // an entry is touched when a line passes
}

type limitEntry struct {
	suppressed int // lines held back since the last that passed
}

// overflowKey is the key of Recent's shared overflow entry.
const overflowKey = "\x00overflow"

// NewLimiter returns a Limiter letting one line per key through per
// interval (at least 1ns), tracking at most maxKeys keys (at least 2, one
// of them the overflow entry). now is the clock; nil means time.Now.
func NewLimiter(interval time.Duration, maxKeys int, now func() time.Time) *Limiter {
	if interval <= 0 {
		interval = 1
	}
	if now == nil {
		now = time.Now
	}
	// An entry past its interval with nothing held back carries no
	// information: it may be forgotten.
	idle := func(e *limitEntry) bool { return e.suppressed == 0 }
	return &Limiter{interval: interval, now: now, keys: NewRecent(maxKeys, interval, idle)}
}

// Allow reports whether a line for key may be logged now and, if so, how
// many lines for that key were held back since the last one logged (log it
// as "suppressed" when it is not zero). When it returns false the line is
// counted and must not be logged.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys.Get(key, now)
	if now.Sub(e.Touched()) < l.interval {
		e.Value.suppressed++
		return false, 0
	}
	suppressed, e.Value.suppressed = e.Value.suppressed, 0
	l.keys.Touch(e, now)
	return true, suppressed
}

// Log logs msg at level on log when a line for key may pass (Allow), with
// the lines held back since as "suppressed" when there were any.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	ok, suppressed := l.Allow(key)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	log.Log(context.Background(), level, msg, args...)
}
