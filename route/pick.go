package route

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

// sessionLister is implemented by upstreams that can list their binds
// (smppclient.Pool does); the router then keeps all segments of one
// concatenated message on one bind.
type sessionLister interface {
	Sessions() []smppclient.SessionInfo
}

// Pick chooses the member for an attempt: by weight among the members that
// are up and not cooling down after repeated failures (weight 0, a backup,
// only when no weighted member qualifies; members that are up but cooling
// down only when no other member is up; the first member when none is up,
// so that it waits route_wait). Upstreams named in avoid are left out while
// another qualifying member exists. Pick does not look at free window
// slots, so the split by weight holds under load; Forward moves a submit
// that waited its member's route_wait in vain to another member.
//
// segKey identifies the message a segment belongs to (seg.Total > 0): its
// member is chosen by weighted rendezvous hashing, so all segments with one
// segKey get the same member, and a member going down or coming back moves
// only the messages that hash to that member.
func (r *Router) Pick(account string, seg smpp.Segment, segKey string, avoid map[string]bool) (Member, bool) {
	all := r.members(account)
	if len(all) == 0 {
		return Member{}, false
	}
	now := r.cfg.Now()
	var pool []Member
	for _, strict := range []bool{true, false} {
		pool = r.candidates(all, avoid, now, strict)
		if len(pool) > 0 {
			break
		}
	}
	if len(pool) == 0 {
		// Nothing is up: take the first member and let it wait route_wait.
		return all[0], true
	}
	if seg.Total > 0 {
		return rendezvous(pool, segKey, func(m Member) string { return m.Upstream.Name() }, func(m Member) int { return m.Weight }), true
	}
	total := 0
	for _, m := range pool {
		total += max(m.Weight, 1)
	}
	n := rand.IntN(total)
	for _, m := range pool {
		w := max(m.Weight, 1)
		if n < w {
			return m, true
		}
		n -= w
	}
	return pool[len(pool)-1], true
}

// candidates are the members Pick chooses from: up, not avoided (unless
// every member that is up is), healthy when strict; weighted ones, or
// else the backups.
func (r *Router) candidates(all []Member, avoid map[string]bool, now time.Time, strict bool) []Member {
	usable := func(m Member) bool {
		return m.Upstream.Up() > 0 && (!strict || r.health(m.Upstream.Name()).ok(now))
	}
	ms := all
	if len(avoid) > 0 {
		// Backups stay out while a weighted member is usable, avoided or
		// not: a weighted upstream that answered a temporary error is tried
		// again rather than a backup.
		weightedUp := slices.ContainsFunc(all, func(m Member) bool { return m.Weight > 0 && usable(m) })
		var rest []Member
		for _, m := range all {
			if !avoid[m.Upstream.Name()] && usable(m) && (m.Weight > 0 || !weightedUp) {
				rest = append(rest, m)
			}
		}
		if len(rest) > 0 {
			ms = rest
		}
	}
	var weighted, backups []Member
	for _, m := range ms {
		if !usable(m) {
			continue
		}
		if m.Weight > 0 {
			weighted = append(weighted, m)
		} else {
			backups = append(backups, m)
		}
	}
	if len(weighted) > 0 {
		return weighted
	}
	return backups
}

// overflowTarget reports whether a submit that found no free slot (or no
// bind) on the members in tried, where nothing was sent, can try another
// member of the route: one that is up and qualifies as Pick would choose
// it (weighted members first; backups only while no weighted one is up).
func (r *Router) overflowTarget(account string, tried map[string]bool) bool {
	now := r.cfg.Now()
	for _, strict := range []bool{true, false} {
		pool := r.candidates(r.members(account), nil, now, strict)
		if len(pool) == 0 {
			continue
		}
		for _, m := range pool {
			if !tried[m.Upstream.Name()] {
				return true
			}
		}
		return false
	}
	return false
}

// pick is Pick for Forward: a segment of a message whose earlier segments
// went to an upstream that has a bound session goes there again — cooling
// down or not, avoided or not (SPEC §6) — and to the same bind when that
// bind is still up. It returns the member and the session to prefer (""
// for none).
func (r *Router) pick(account string, seg smpp.Segment, segKey, msgKey string, avoid map[string]bool) (Member, string, bool) {
	if seg.Total == 0 {
		m, ok := r.Pick(account, seg, segKey, avoid)
		return m, "", ok
	}
	now := r.cfg.Now()
	if st, ok := r.sticky.get(msgKey, now); ok {
		for _, m := range r.members(account) {
			if m.Upstream.Name() == st.upstream && m.Upstream.Up() > 0 {
				return m, r.preferSession(m, msgKey, st.session), true
			}
		}
	}
	m, ok := r.Pick(account, seg, segKey, avoid)
	if !ok {
		return m, "", false
	}
	return m, r.preferSession(m, msgKey, ""), true
}

// preferSession returns the bind of m that the segments of message msgKey
// should use: last, when it is still bound, else one chosen by rendezvous
// hashing over m's bound transmitting sessions — so that segments sent at
// the same time, before any of them reached a bind, agree without
// coordinating. "" when m cannot list its sessions.
func (r *Router) preferSession(m Member, msgKey, last string) string {
	sl, ok := m.Upstream.(sessionLister)
	if !ok {
		return last
	}
	var bound []string
	for _, s := range sl.Sessions() {
		if s.State != smppclient.StateBound || s.Bind == smpp.BindReceiver {
			continue
		}
		if s.ID == last {
			return last
		}
		bound = append(bound, s.ID)
	}
	if len(bound) == 0 {
		return ""
	}
	return rendezvous(bound, msgKey, func(id string) string { return id }, func(string) int { return 1 })
}

// rendezvous returns the item with the highest weighted rendezvous score
// for key (weight below 1 counts as 1). Removing an item moves only the keys
// that item had; adding one takes a share of keys from every item and
// moves nothing else.
func rendezvous[T any](items []T, key string, name func(T) string, weight func(T) int) T {
	best, bestScore := 0, math.Inf(1)
	for i, it := range items {
		h := fnv.New64a()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(name(it)))
		u := (float64(mix64(h.Sum64())>>11) + 0.5) / (1 << 53) // uniform in (0, 1)
		// -ln(u)/w is exponential with rate w: the smallest wins with
		// probability w/Σw.
		if s := -math.Log(u) / float64(max(weight(it), 1)); s < bestScore {
			best, bestScore = i, s
		}
	}
	return items[best]
}

// mix64 is the splitmix64 finaliser: FNV's high bits depend weakly on the
// last bytes hashed.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// messageKey identifies one concatenated message: the upstream-choice key
// plus the reference number and part count.
func messageKey(segKey string, seg smpp.Segment) string {
	return segKey + "\x00" + strconv.Itoa(int(seg.Ref)) + "/" + strconv.Itoa(int(seg.Total))
}

// stickyTable remembers, per concatenated message, the upstream and bind
// its segments went to, for StickyTTL and for at most stickyMax messages
// (beyond that, new messages are not remembered and fall back to hashing).
type stickyTable struct {
	ttl time.Duration

	mu        sync.Mutex
	m         map[string]stickyEntry
	nextSweep time.Time // expired entries are dropped by the first put after it
}

// stickyMax bounds the table: about 150 bytes an entry, 15 MB in all.
const stickyMax = 100_000

type stickyEntry struct {
	upstream, session string
	expires           time.Time
}

func (t *stickyTable) get(key string, now time.Time) (stickyEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok || now.After(e.expires) {
		return stickyEntry{}, false
	}
	return e, true
}

// put records that a segment of message key was written to session
// of upstream. The first upstream remembered stays the message's: a
// segment written elsewhere (while it had no bound session) changes
// nothing; one written to another bind of it moves the preferred bind.
// Each write extends the memory by ttl.
func (t *stickyTable) put(key, upstream, session string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]stickyEntry{}
	}
	if !now.Before(t.nextSweep) {
		// At most once a second, so that a full table does not cost a
		// sweep per segment.
		for k, e := range t.m {
			if now.After(e.expires) {
				delete(t.m, k)
			}
		}
		t.nextSweep = now.Add(time.Second)
	}
	e, ok := t.m[key]
	switch {
	case !ok && len(t.m) >= stickyMax:
		return
	case ok && e.upstream != upstream:
		return
	}
	t.m[key] = stickyEntry{upstream: upstream, session: session, expires: now.Add(t.ttl)}
}

// len is the number of remembered messages (tests).
func (t *stickyTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
