package dedup

import (
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// finalsCap bounds the records the engine remembers as settled by its own
// decisions: ~22 MB (~345 bytes each with the map, BenchmarkFinalsMemory;
// ~660 when each kept a copy of its whole record), two seconds
// of answers at 30,000 submits/s, for the retries that follow a burst by
// seconds (a retry answered from here took ~10 µs of CPU, one read from
// the store ~20; 65,536 instead of 32,768 added ~10 MB to the peak RSS
// of a 60,000-key run). readsCap bounds those it learned by reading them
// (the store, or a create that found the key taken).
const (
	finalsCap = 1 << 16
	readsCap  = 1 << 12
)

// finals remembers recently settled records (accepted or rejected: no
// later write changes what a duplicate is answered) so that a retry is
// answered without reading the store. It keeps of each only what that
// answer needs (final), and get makes a record of it again: the fields a
// decision reads, never the history, the owner or the upstream session. A
// hit is still checked for expiry and the dedup window by the caller,
// exactly as a record read from the store; the oldest is forgotten first.
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

// final is a remembered record — what answering a duplicate reads of it —
// with its ring and its slot there: a key forgotten and remembered again
// has a newer slot, and its older one, when reused, must not forget it.
type final struct {
	fp                 [32]byte
	created, expires   time.Time
	messageID, proxyID string
	upstream           string
	status             uint32
	slot               int32
	fpVersion          uint8
	accepted           bool // else rejected
	read               bool // in the ring of records read
}

// record sets *r to the record f remembers, as decisions read it.
func (f *final) record(k state.Key, r *state.Record) {
	st := state.Rejected
	if f.accepted {
		st = state.Accepted
	}
	*r = state.Record{Key: k, Fingerprint: f.fp, FingerprintVersion: f.fpVersion, State: st,
		Status: f.status, MessageID: f.messageID, ProxyID: f.proxyID, Upstream: f.upstream,
		Created: f.created, Expires: f.expires}
}

func newFinals(capacity int) *finals {
	return newFinalsOf(capacity, readsCap)
}

func newFinalsOf(decided, read int) *finals {
	return &finals{m: make(map[state.Key]final, decided+read),
		decided: ring{keys: make([]state.Key, 0, decided)}, read: ring{keys: make([]state.Key, 0, read)}}
}

// get sets *r to the remembered record of k (see final) and reports
// whether there is one.
func (f *finals) get(k state.Key, r *state.Record) bool {
	f.mu.Lock()
	e, ok := f.m[k]
	f.mu.Unlock()
	if ok {
		e.record(k, r)
	}
	return ok
}

// put remembers r, settled by the engine, if it is settled.
func (f *finals) put(r *state.Record) { f.remember(r, false) }

// learn remembers r, read from the store (or found by a create), if it
// is settled; see put.
func (f *finals) learn(r *state.Record) { f.remember(r, true) }

func (f *finals) remember(r *state.Record, read bool) {
	if r == nil || (r.State != state.Accepted && r.State != state.Rejected) {
		return
	}
	e := final{fp: r.Fingerprint, created: r.Created, expires: r.Expires, messageID: r.MessageID,
		proxyID: r.ProxyID, upstream: r.Upstream, status: r.Status, fpVersion: r.FingerprintVersion,
		accepted: r.State == state.Accepted, read: read}
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.m[r.Key]; ok {
		e.slot, e.read = old.slot, old.read
		f.m[r.Key] = e
		return
	}
	g := &f.decided
	if read {
		g = &f.read
	}
	slot := len(g.keys)
	if slot < cap(g.keys) {
		g.keys = append(g.keys, r.Key)
	} else {
		slot = g.next
		if old := g.keys[slot]; int(f.m[old].slot) == slot && f.m[old].read == read {
			delete(f.m, old)
		}
		g.keys[slot] = r.Key
		g.next = (g.next + 1) % len(g.keys)
	}
	e.slot = int32(slot)
	f.m[r.Key] = e
}

// forget drops k (its record was replaced under the key).
func (f *finals) forget(k state.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, k) // its ring slot is reused in turn
}
