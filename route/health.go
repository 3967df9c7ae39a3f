package route

import (
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
)

// health tracks whether an upstream keeps failing. After FailThreshold
// failures in a row (ambiguous outcomes — response timeouts, sessions lost
// after the write — and temporary errors other than ESME_RTHROTTLED) the
// upstream cools down: Pick leaves it out while another member of the route
// is up (later segments of the messages it already carries still go to it
// while it has a bound session: SPEC §6). After the cool-down it takes traffic again: one more failure
// cools it down again for twice as long (up to MaxCooldown); a success (an
// answer that is not a temporary error, permanent errors included) ends
// the episode. Failures reported while it cools down (of submits written
// before) are not counted. Throttling (0x58) and refusals for lack of a
// free window or token are load, not failure: the pool already backs off
// from a throttling bind.
type health struct {
	mu    sync.Mutex
	fails int       // consecutive failures
	trips int       // cool-downs in this episode
	until time.Time // end of the current cool-down
}

// ok reports whether the upstream is not cooling down at now.
func (h *health) ok(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !now.Before(h.until)
}

// outcome kinds for observe.
const (
	outcomeNeutral = iota
	outcomeSuccess
	outcomeFailure
)

func classify(res dedup.Result) int {
	switch res.Kind {
	case dedup.Ambiguous:
		return outcomeFailure
	case dedup.Answered:
		if res.Status == smpp.StatusThrottled {
			return outcomeNeutral
		}
		if res.Status.Temporary() {
			return outcomeFailure
		}
		return outcomeSuccess
	}
	return outcomeNeutral
}

// observe records an outcome at now and reports whether it started a
// cool-down, and how long.
func (h *health) observe(kind int, now time.Time, cfg *Config) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch kind {
	case outcomeSuccess:
		h.fails, h.trips = 0, 0
		return 0, false
	case outcomeFailure:
		if now.Before(h.until) {
			return 0, false // already cooling down: outcomes of earlier writes
		}
		h.fails++
		if h.fails < cfg.FailThreshold && h.trips == 0 {
			return 0, false
		}
		d := cfg.Cooldown << min(h.trips, 20)
		d = min(d, cfg.MaxCooldown)
		h.fails = 0
		h.trips++
		h.until = now.Add(d)
		return d, true
	}
	return 0, false
}

// health returns the tracker of upstream name; a name outside every route
// gets a throw-away tracker.
func (r *Router) health(name string) *health {
	if h := (*r.healths.Load())[name]; h != nil {
		return h
	}
	return &health{}
}

// Healthy reports whether upstream name is not cooling down after repeated
// failures (for the admin API and tests).
func (r *Router) Healthy(name string) bool { return r.health(name).ok(r.cfg.Now()) }
