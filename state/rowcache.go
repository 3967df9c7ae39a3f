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
// The values are the committed encodings, never modified after; a shard
// forgets its oldest key when full.
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
	m    map[string][]byte
	ring []string // keys in the order they came, oldest at next
	next int
}

func newRowCache(keys int) *rowCache {
	c := &rowCache{seed: maphash.MakeSeed()}
	per := max(keys/rowShards, 1)
	for i := range c.shards {
		c.shards[i].m = make(map[string][]byte, per)
		c.shards[i].ring = make([]string, 0, per)
	}
	return c
}

func (c *rowCache) shard(k []byte) *rowShard {
	return &c.shards[maphash.Bytes(c.seed, k)%rowShards]
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
	sh := c.shard(key)
	sh.mu.Lock()
	v, ok := sh.m[string(key)]
	sh.mu.Unlock()
	return v, ok
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
			sh := c.shard(w.key)
			sh.mu.Lock()
			if w.del || err != nil {
				delete(sh.m, string(w.key))
			} else {
				sh.put(w.key, w.val)
			}
			sh.mu.Unlock()
		}
	}
}

func (sh *rowShard) put(key, val []byte) {
	if _, ok := sh.m[string(key)]; ok {
		sh.m[string(key)] = val
		return
	}
	k := string(key)
	if len(sh.ring) < cap(sh.ring) {
		sh.ring = append(sh.ring, k)
	} else {
		// The oldest key makes room (it may have been deleted since: its
		// slot is reused all the same).
		delete(sh.m, sh.ring[sh.next])
		sh.ring[sh.next] = k
		sh.next = (sh.next + 1) % len(sh.ring)
	}
	sh.m[k] = val
}
