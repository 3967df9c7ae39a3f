package dedup

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/state"
)

// finalsCap bounds the records the engine remembers as settled by its own
// decisions (Config.RecentAnswers, store.recent_answers, overrides it):
// 262,144 answers, 186 bytes each with their place in the index
// (BenchmarkFinalsMemory), ~49 MB when full, none of it scanned by the
// garbage collector; about nine seconds of answers at 30,000 submits/s, so
// that the retries of a client's last few seconds (a pass of resends after
// a timeout, a failover of its own) are answered without reading the
// store. A retry answered from here took ~8 µs of the proxy's CPU, one read
// from the store ~16–20 µs; with 65,536 answers kept, the retries of a
// 150,000-key burst went at 80–91k/s instead of 126–143k/s
// (docs/performance.md). readsCap bounds those it learned by reading them
// (the store, or a create that found the key taken), so that a client's
// second pass of retries over keys another instance settled is answered
// from memory.
const (
	finalsCap = config.DefaultRecentAnswers
	readsCap  = 1 << 14
)

// finals remembers recently settled records (accepted or rejected: no
// later write changes what a duplicate is answered) so that a retry is
// answered without reading the store. It keeps of each only what that
// answer needs (slot), and get makes a record of it again: the fields a
// decision reads, never the history, the owner or the upstream session. A
// hit is still checked for expiry and the dedup window by the caller,
// exactly as a record read from the store; the oldest is forgotten first.
//
// The records the engine settled itself and those it only read take
// separate rings, so that a pass of retries over keys it no longer
// remembers (a client resending a day's backlog) cannot push out the keys
// settled a moment ago, whose retries are the likeliest.
//
// A slot holds no pointer (the collector never scans the rings) and no
// key: a key is known by two independent 64-bit hashes of it, the first
// indexing m, the second checked on a hit. Two keys are taken for one only
// if both hashes of both agree, a chance of 2^-64 for a key that meets
// another in m (itself a chance of about 2^-46 per lookup with the rings
// full at the default size, 2^-42 at the largest). A record whose
// upstream name would be the 65,536th, or whose message id alone is over
// 64 octets (SMPP allows no such id), is not remembered: it is read from
// the store.
type finals struct {
	seed, seed2 maphash.Seed
	mu          sync.Mutex
	// m finds a slot by its key's hash (hash): ref. A key whose hash
	// another key has replaces it there (it is then not found: a read of
	// the store, as when forgotten).
	m       map[uint64]int32
	decided ring
	read    ring
	// names interns the upstream names of the slots (slot.up: index+1).
	names  []string
	nameOf map[string]uint16
	// hashOf, when set, replaces hash (tests: keys whose hashes collide).
	hashOf func(state.Key) uint64
}

// slotIDs is the room of a slot for its ids: the message id and the proxy
// id when both fit, else only the id the client was given (the proxy id
// when there is one, as the answer reads it: state.Record.ClientMessageID;
// the upstream's id is then given back empty). SMPP message ids and
// proxy-issued ids are at most 64 octets, so the client's id always fits.
const slotIDs = 64

// slot is what answering a duplicate reads of a remembered record: 152
// bytes, no pointer.
type slot struct {
	h, h2        uint64 // hash(key), hash2(key)
	fp           [32]byte
	createdSec   int64
	expiresSec   int64
	createdNsec  int32 // -1: the zero time
	expiresNsec  int32
	status       uint32
	fpVersion    uint8
	accepted     bool // else rejected
	up           uint16
	idLen, pxLen uint8
	ids          [slotIDs]byte // the message id (or none), then the proxy id
}

// ringChunk is how many slots a ring allocates at a time: a ring takes
// memory as it fills.
const ringChunk = 2048

// ring is the insertion order of one kind of slot; slot next is the
// oldest once full.
type ring struct {
	chunks   [][]slot
	n, limit int
	next     int
}

func newRing(limit int) ring { return ring{limit: limit} }

// at is slot i (i < r.n).
func (r *ring) at(i int) *slot { return &r.chunks[i/ringChunk][i%ringChunk] }

// place returns the slot the next entry takes and its index; evicted is
// the slot's hash when it held an entry before (then the caller drops it
// from m if m still names it).
func (r *ring) place() (i int, s *slot, evicted bool) {
	if r.n < r.limit {
		i = r.n
		if i%ringChunk == 0 {
			r.chunks = append(r.chunks, make([]slot, min(ringChunk, r.limit-i)))
		}
		r.n++
		return i, r.at(i), false
	}
	i = r.next
	r.next = (r.next + 1) % r.n
	return i, r.at(i), true
}

// ref names slot i of the decided ring (i) or of the read ring (-1-i).
func ref(read bool, i int) int32 {
	if read {
		return int32(-1 - i)
	}
	return int32(i)
}

// at is the slot ref r names.
func (f *finals) at(r int32) *slot {
	if r < 0 {
		return f.read.at(int(-1 - r))
	}
	return f.decided.at(int(r))
}

func newFinals(capacity int) *finals {
	return newFinalsOf(capacity, readsCap)
}

func newFinalsOf(decided, read int) *finals {
	return &finals{seed: maphash.MakeSeed(), seed2: maphash.MakeSeed(), m: map[uint64]int32{},
		decided: newRing(decided), read: newRing(read), nameOf: map[string]uint16{}}
}

// hashKey is k's hash under seed. Each field is written after its length,
// so that two different keys never hash the same bytes (a key may hold
// any octet, NUL included).
func hashKey(seed maphash.Seed, k state.Key) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var n [8]byte
	for _, f := range [...]string{k.Account, k.Key, k.Segment} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.WriteString(f)
	}
	return h.Sum64()
}

// hash is k's hash in m.
func (f *finals) hash(k state.Key) uint64 {
	if f.hashOf != nil {
		return f.hashOf(k)
	}
	return hashKey(f.seed, k)
}

// lookup returns k's slot, or nil. f.mu is held.
func (f *finals) lookup(h, h2 uint64) *slot {
	if r, ok := f.m[h]; ok {
		if s := f.at(r); s.h == h && s.h2 == h2 {
			return s
		}
	}
	return nil
}

// get sets *r to the remembered record of k (see slot) and reports
// whether there is one.
func (f *finals) get(k state.Key, r *state.Record) bool {
	h := f.hash(k)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[h]; !ok {
		return false // a fresh key, mostly: no second hash
	}
	s := f.lookup(h, hashKey(f.seed2, k))
	if s == nil {
		return false
	}
	st := state.Rejected
	if s.accepted {
		st = state.Accepted
	}
	var up string
	if s.up > 0 {
		up = f.names[s.up-1]
	}
	ids := s.ids[:s.idLen+s.pxLen]
	*r = state.Record{Key: k, Fingerprint: s.fp, FingerprintVersion: s.fpVersion, State: st,
		Status: s.status, MessageID: string(ids[:s.idLen]), ProxyID: string(ids[s.idLen:]), Upstream: up,
		Created: fromSlotTime(s.createdSec, s.createdNsec), Expires: fromSlotTime(s.expiresSec, s.expiresNsec)}
	return true
}

// slotTime is t as a slot keeps it (UTC, like a record read from the
// store; the zero time as nsec -1).
func slotTime(t time.Time) (int64, int32) {
	if t.IsZero() {
		return 0, -1
	}
	return t.Unix(), int32(t.Nanosecond())
}

func fromSlotTime(sec int64, nsec int32) time.Time {
	if nsec < 0 {
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// settled reports whether r is settled: accepted or rejected, so that no
// later write changes what a duplicate of it is answered.
func settled(r *state.Record) bool { return r.State == state.Accepted || r.State == state.Rejected }

// put remembers r, settled by the engine, if it is settled.
func (f *finals) put(r *state.Record) { f.remember(r, false) }

// learn remembers r, read from the store (or found by a create), if it
// is settled; see put.
func (f *finals) learn(r *state.Record) { f.remember(r, true) }

func (f *finals) remember(r *state.Record, read bool) {
	if r == nil || !settled(r) {
		return
	}
	h, h2 := f.hash(r.Key), hashKey(f.seed2, r.Key)
	msgID := r.MessageID
	if len(msgID)+len(r.ProxyID) > slotIDs && r.ProxyID != "" {
		msgID = "" // the answer reads only the proxy id
	}
	fits := len(msgID)+len(r.ProxyID) <= slotIDs
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.lookup(h, h2) // its ring and slot stay
	up, named := f.intern(r.Upstream)
	if !fits || !named {
		if s != nil {
			delete(f.m, h) // what it remembered is no longer the record
		}
		return
	}
	if s == nil {
		g := &f.decided
		if read {
			g = &f.read
		}
		var i int
		var evicted bool
		i, s, evicted = g.place()
		// The oldest makes room, unless it was forgotten (or its hash
		// taken by another key) since: m then names another slot, or
		// none, under its hash.
		if at, ok := f.m[s.h]; evicted && ok && at == ref(read, i) {
			delete(f.m, s.h)
		}
		f.m[h] = ref(read, i)
	}
	*s = slot{h: h, h2: h2, fp: r.Fingerprint, status: r.Status, fpVersion: r.FingerprintVersion,
		accepted: r.State == state.Accepted, up: up, idLen: uint8(len(msgID)), pxLen: uint8(len(r.ProxyID))}
	s.createdSec, s.createdNsec = slotTime(r.Created)
	s.expiresSec, s.expiresNsec = slotTime(r.Expires)
	copy(s.ids[copy(s.ids[:], msgID):], r.ProxyID)
}

// intern returns name's index+1 in f.names (0 for ""), adding it; false
// when the table is full. f.mu is held.
func (f *finals) intern(name string) (uint16, bool) {
	if name == "" {
		return 0, true
	}
	if i, ok := f.nameOf[name]; ok {
		return i, true
	}
	if len(f.names) >= 1<<16-1 {
		return 0, false
	}
	f.names = append(f.names, name)
	i := uint16(len(f.names))
	f.nameOf[name] = i
	return i, true
}

// forget drops k (its record was replaced under the key).
func (f *finals) forget(k state.Key) {
	h, h2 := f.hash(k), hashKey(f.seed2, k)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lookup(h, h2) != nil {
		delete(f.m, h) // its ring slot is reused in turn
	}
}

// RecentAnswers is how many answers of records it settled the engine
// remembers at most (Config.RecentAnswers).
func (e *Engine) RecentAnswers() int { return e.finals.decided.limit }
