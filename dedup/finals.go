package dedup

import (
	"sync"

	"github.com/smppproxy/smppproxy/state"
)

// finalsCap bounds the records the engine remembers as settled by its own
// decisions: about 20 MB, two seconds of answers at 30,000 submits/s, for
// the retries that follow a burst by seconds (a retry answered from here
// took ~10 µs of CPU, one read from the store ~20; 65,536 instead of
// 32,768 added ~10 MB to the peak RSS of a 60,000-key run). readsCap
// bounds those it learned by reading them (the store, or a create that
// found the key taken).
const (
	finalsCap = 1 << 16
	readsCap  = 1 << 12
)

// finals remembers recently settled records (accepted or rejected: no
// later write changes what a duplicate is answered) so that a retry is
// answered without reading the store. Entries are trimmed copies (no
// history); the oldest is forgotten first. A hit is still checked for
// expiry and the dedup window by the caller, exactly as a record read
// from the store.
//
// The records the engine settled itself and those it only read take
// separate rings, so that a pass of retries over keys it no longer
// remembers (a client resending a day's backlog) cannot push out the keys
// settled a moment ago, whose retries are the likeliest.
type finals struct {
	mu      sync.Mutex
	m       map[state.Key]final
	decided ring
	read    ring
}

// ring is the insertion order of one kind of entry; keys[next] is the
// oldest once full.
type ring struct {
	keys []state.Key
	next int
}

// final is a remembered record, its ring and its slot there: a key
// forgotten and remembered again has a newer slot, and its older one,
// when reused, must not forget it.
type final struct {
	r    *state.Record
	slot int
	read bool // in the ring of records read
}

func newFinals(capacity int) *finals {
	return newFinalsOf(capacity, readsCap)
}

func newFinalsOf(decided, read int) *finals {
	return &finals{m: make(map[state.Key]final, decided+read),
		decided: ring{keys: make([]state.Key, 0, decided)}, read: ring{keys: make([]state.Key, 0, read)}}
}

// get returns the remembered record of k, or nil.
func (f *finals) get(k state.Key) *state.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[k].r
}

// put remembers r, settled by the engine, if it is settled. r is not
// modified afterwards by the caller (it is stored as given, trimmed of
// its history).
func (f *finals) put(r *state.Record) { f.remember(r, false) }

// learn remembers r, read from the store (or found by a create), if it
// is settled; see put.
func (f *finals) learn(r *state.Record) { f.remember(r, true) }

func (f *finals) remember(r *state.Record, read bool) {
	if r == nil || (r.State != state.Accepted && r.State != state.Rejected) {
		return
	}
	c := *r
	c.History = nil
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.m[c.Key]; ok {
		e.r = &c
		f.m[c.Key] = e
		return
	}
	g := &f.decided
	if read {
		g = &f.read
	}
	slot := len(g.keys)
	if slot < cap(g.keys) {
		g.keys = append(g.keys, c.Key)
	} else {
		slot = g.next
		if old := g.keys[slot]; f.m[old].slot == slot && f.m[old].read == read {
			delete(f.m, old)
		}
		g.keys[slot] = c.Key
		g.next = (g.next + 1) % len(g.keys)
	}
	f.m[c.Key] = final{r: &c, slot: slot, read: read}
}

// forget drops k (its record was replaced under the key).
func (f *finals) forget(k state.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, k) // its ring slot is reused in turn
}
