package state

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// rowCache keeps the values of the record keys and message-id index
// entries the store committed last, so that the reads that follow a write
// within moments — a submit's outcome after its create, a receipt's
// lookup by message id and its mark, a retry in flight — do not search
// Badger: a Badger lookup visits every memtable and every level of its
// tree even for a key written a millisecond ago.
//
// The committer updates it (add) after a batch is in Badger and before
// the snapshot that shows the batch is published: a put replaces the
// value, a delete drops it, and a failed batch drops every key it wrote.
// So a value found here is the value of the newest commit of its key,
// never older than the reader's snapshot. A reader that needs its reads
// to agree with each other beyond one key (a record and its history log)
// reads the snapshot instead.
//
// The values are the committed encodings, never modified after, and so
// are the keys (each write's own); a shard forgets its oldest key when
// full. A shard finds a key by its 64-bit hash and checks the key itself:
// a key whose hash another key has takes its place there (the other is
// then read from Badger, as when forgotten).
type rowCache struct {
	seed   maphash.Seed
	shards [rowShards]rowShard
}

const (
	rowShards = 16
	// rowCacheKeys: the keys kept (two per submit: its record and its
	// message-id entry), about a second of submits at saturation here.
	rowCacheKeys = 32768
)

type rowShard struct {
	mu   sync.Mutex
	m    map[uint64]int32 // a key's hash -> its slot in ring
	ring []rowEntry       // in the order they came, oldest at next
	next int
}

type rowEntry struct {
	h        uint64
	key, val []byte
}

func newRowCache(keys int) *rowCache {
	c := &rowCache{seed: maphash.MakeSeed()}
	per := max(keys/rowShards, 1)
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]int32, per)
		c.shards[i].ring = make([]rowEntry, 0, per)
	}
	return c
}

func (c *rowCache) hash(k []byte) (uint64, *rowShard) {
	h := maphash.Bytes(c.seed, k)
	return h, &c.shards[h%rowShards]
}

// cached reports whether the cache keeps key: record keys and message-id
// index entries.
func cached(key []byte) bool {
	return bytes.HasPrefix(key, []byte(prefixRecord)) || bytes.HasPrefix(key, []byte(prefixMessage))
}

// get returns the value last committed under key, if the cache has it.
// The value must not be modified.
func (c *rowCache) get(key []byte) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	h, sh := c.hash(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.find(h, key); ok {
		return sh.ring[i].val, true
	}
	return nil, false
}

// add takes the writes of a batch Badger has (err == nil), in commit
// order, or forgets the keys of a batch that failed (what Badger holds of
// them is then unknown).
func (c *rowCache) add(reqs []*request, err error) {
	if c == nil {
		return
	}
	for _, r := range reqs {
		for i := range r.writes {
			w := &r.writes[i]
			if !cached(w.key) {
				continue
			}
			h, sh := c.hash(w.key)
			sh.mu.Lock()
			if w.del || err != nil {
				if _, ok := sh.find(h, w.key); ok {
					delete(sh.m, h)
				}
			} else {
				sh.put(h, w.key, w.val)
			}
			sh.mu.Unlock()
		}
	}
}

// find returns key's slot. sh.mu is held.
func (sh *rowShard) find(h uint64, key []byte) (int32, bool) {
	i, ok := sh.m[h]
	if ok && bytes.Equal(sh.ring[i].key, key) {
		return i, true
	}
	return 0, false
}

func (sh *rowShard) put(h uint64, key, val []byte) {
	if i, ok := sh.find(h, key); ok {
		sh.ring[i].val = val
		return
	}
	i := int32(len(sh.ring))
	if len(sh.ring) < cap(sh.ring) {
		sh.ring = append(sh.ring, rowEntry{h: h, key: key, val: val})
	} else {
		// The oldest makes room, unless it was deleted (or its hash taken)
		// since: the hash then names another slot, or none.
		i = int32(sh.next)
		if j, ok := sh.m[sh.ring[i].h]; ok && j == i {
			delete(sh.m, sh.ring[i].h)
		}
		sh.ring[i] = rowEntry{h: h, key: key, val: val}
		sh.next = (sh.next + 1) % len(sh.ring)
	}
	sh.m[h] = i
}
