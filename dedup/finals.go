package dedup

import (
	"sync"

	"github.com/smppproxy/smppproxy/state"
)

// finalsCap bounds the records the engine remembers as settled: a few MB
// at most, enough for the retries that follow a burst by seconds.
const finalsCap = 1 << 15

// finals remembers recently settled records (accepted or rejected: no
// later write changes what a duplicate is answered) so that a retry is
// answered without reading the store. Entries are trimmed copies (no
// history); the oldest is forgotten first. A hit is still checked for
// expiry and the dedup window by the caller, exactly as a record read
// from the store.
type finals struct {
	mu   sync.Mutex
	m    map[state.Key]final
	ring []state.Key // insertion order; ring[next] is the oldest once full
	next int
}

// final is a remembered record and its slot in the ring: a key forgotten
// and remembered again has a newer slot, and its older one, when reused,
// must not forget it.
type final struct {
	r    *state.Record
	slot int
}

func newFinals(capacity int) *finals {
	return &finals{m: make(map[state.Key]final, capacity), ring: make([]state.Key, 0, capacity)}
}

// get returns the remembered record of k, or nil.
func (f *finals) get(k state.Key) *state.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[k].r
}

// put remembers r if it is settled. r is not modified afterwards by the
// caller (it is stored as given, trimmed of its history).
func (f *finals) put(r *state.Record) {
	if r == nil || (r.State != state.Accepted && r.State != state.Rejected) {
		return
	}
	c := *r
	c.History = nil
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.m[c.Key]; ok {
		f.m[c.Key] = final{r: &c, slot: e.slot}
		return
	}
	slot := len(f.ring)
	if slot < cap(f.ring) {
		f.ring = append(f.ring, c.Key)
	} else {
		slot = f.next
		if old := f.ring[slot]; f.m[old].slot == slot {
			delete(f.m, old)
		}
		f.ring[slot] = c.Key
		f.next = (f.next + 1) % len(f.ring)
	}
	f.m[c.Key] = final{r: &c, slot: slot}
}

// forget drops k (its record was replaced under the key).
func (f *finals) forget(k state.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, k) // its ring slot is reused in turn
}
