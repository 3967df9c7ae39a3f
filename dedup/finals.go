package dedup

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// finalsCap bounds the records the engine remembers as settled by its own
// decisions: ~16 MB (~250 bytes each with the map, BenchmarkFinalsMemory;
// ~660 when each kept a copy of its whole record), two seconds
// of answers at 30,000 submits/s, for the retries that follow a burst by
// seconds (a retry answered from here took ~10 µs of CPU, one read from
// the store ~20; 65,536 instead of 32,768 added ~10 MB to the peak RSS
// of a 60,000-key run). readsCap bounds those it learned by reading them
// (the store, or a create that found the key taken): ~4 MB, so that a
// client's second pass of retries over keys another instance settled is
// answered from memory.
const (
	finalsCap = 1 << 16
	readsCap  = 1 << 14
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
	seed maphash.Seed
	mu   sync.Mutex
	// m finds an entry by its key's hash (hash): ref. A key whose hash
	// another key has replaces it there (it is then not found: a read of
	// the store, as when forgotten).
	m       map[uint64]int32
	decided ring
	read    ring
	// hashOf, when set, replaces hash (tests: keys whose hashes collide).
	hashOf func(state.Key) uint64
}

// ring is the insertion order of one kind of entry; ents[next] is the
// oldest once full.
type ring struct {
	ents []entry
	next int
}

type entry struct {
	h   uint64 // hash(key)
	key state.Key
	f   final
}

// ref names slot i of the decided ring (i) or of the read ring (-1-i).
func ref(read bool, i int) int32 {
	if read {
		return int32(-1 - i)
	}
	return int32(i)
}

// at is the entry ref r names.
func (f *finals) at(r int32) *entry {
	if r < 0 {
		return &f.read.ents[-1-r]
	}
	return &f.decided.ents[r]
}

// final is what answering a duplicate reads of a remembered record.
type final struct {
	fp                 [32]byte
	created, expires   time.Time
	messageID, proxyID string
	upstream           string
	status             uint32
	fpVersion          uint8
	accepted           bool // else rejected
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
	return &finals{seed: maphash.MakeSeed(), m: make(map[uint64]int32, decided+read),
		decided: ring{ents: make([]entry, 0, decided)}, read: ring{ents: make([]entry, 0, read)}}
}

// hash is k's hash in m.
func (f *finals) hash(k state.Key) uint64 {
	if f.hashOf != nil {
		return f.hashOf(k)
	}
	var h maphash.Hash
	h.SetSeed(f.seed)
	h.WriteString(k.Account)
	h.WriteByte(0)
	h.WriteString(k.Key)
	h.WriteByte(0)
	h.WriteString(k.Segment)
	return h.Sum64()
}

// lookup returns k's entry, or nil. f.mu is held.
func (f *finals) lookup(h uint64, k state.Key) *entry {
	if r, ok := f.m[h]; ok {
		if e := f.at(r); e.key == k {
			return e
		}
	}
	return nil
}

// get sets *r to the remembered record of k (see final) and reports
// whether there is one.
func (f *finals) get(k state.Key, r *state.Record) bool {
	h := f.hash(k)
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.lookup(h, k)
	if e != nil {
		e.f.record(k, r)
	}
	return e != nil
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
	fin := final{fp: r.Fingerprint, created: r.Created, expires: r.Expires, messageID: r.MessageID,
		proxyID: r.ProxyID, upstream: r.Upstream, status: r.Status, fpVersion: r.FingerprintVersion,
		accepted: r.State == state.Accepted}
	h := f.hash(r.Key)
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.lookup(h, r.Key); e != nil {
		e.f = fin // its ring and slot stay
		return
	}
	g := &f.decided
	if read {
		g = &f.read
	}
	slot := len(g.ents)
	if slot < cap(g.ents) {
		g.ents = append(g.ents, entry{h: h, key: r.Key, f: fin})
	} else {
		slot = g.next
		// The oldest makes room, unless it was forgotten (or its hash
		// taken by another key) since: m then names another entry, or
		// none, under its hash.
		oh := g.ents[slot].h
		if at, ok := f.m[oh]; ok && at == ref(read, slot) {
			delete(f.m, oh)
		}
		g.ents[slot] = entry{h: h, key: r.Key, f: fin}
		g.next = (g.next + 1) % len(g.ents)
	}
	f.m[h] = ref(read, slot)
}

// forget drops k (its record was replaced under the key).
func (f *finals) forget(k state.Key) {
	h := f.hash(k)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lookup(h, k) != nil {
		delete(f.m, h) // its ring slot is reused in turn
	}
}
