package state

import (
	"bytes"
	"sync"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/dgraph-io/badger/v4"
)

// keyFilter is a Bloom filter of the record keys and queue dedup markers
// the store holds, so that a lookup of a key the store has never held (a
// fresh submit: the engine's read, then the create's own; a receipt's
// marker when it is queued) answers "not found" without searching
// Badger's memtables and every level of its tree, which costs more than a
// lookup that finds its key. It never says "absent" of a key the store
// holds; it may say "maybe" of one it does not hold (about 1% of them,
// then read from Badger as before).
//
// The invariant: every record key or marker in a snapshot the store has
// published is in the filter. add runs on the committer before the
// snapshot that shows a batch is published, and before the committer's
// own overlay forgets the batch's markers. Until the first build is done,
// every key is "maybe".
//
// The filter is built in the background after open from a scan of those
// keys (two passes, keys only: one counts, one adds, so that it is sized
// for what the store holds), and built again the same way, with twice
// the room, once the keys added since reach its capacity. While a build
// runs, add writes to the filter in use and to the one being built; a
// key committed before the build's scan began is in the scan (its batch
// was in Badger before add saw the new filter).
type keyFilter struct {
	mu        sync.RWMutex
	cur       *bloom.BloomFilter // nil until the first build is done
	next      *bloom.BloomFilter // being built, or nil
	room      uint               // keys cur was sized for
	n         uint               // keys in cur (the build's and those added since)
	nextAdded uint               // keys add put in next (a build in progress)
	asked     bool               // a rebuild is asked for and not begun
	rebuild   chan struct{}      // asks the build loop for a rebuild
	minRoom   uint
	fpRate    float64
	// builds counts the builds put in use; built is closed (and
	// replaced) at each (tests wait on it).
	builds int
	built  chan struct{}
	scans  int // builds from a scan begun (tests)
}

const (
	keyFilterMinRoom = 1 << 20
	keyFilterFP      = 0.01
)

func newKeyFilter(minRoom uint) *keyFilter {
	return &keyFilter{rebuild: make(chan struct{}, 1), minRoom: max(minRoom, 1), fpRate: keyFilterFP, built: make(chan struct{})}
}

// filtered reports whether the filter answers for key: record keys and
// queue dedup markers.
func filtered(key []byte) bool {
	return bytes.HasPrefix(key, []byte(prefixRecord)) || bytes.HasPrefix(key, []byte(prefixDedup))
}

// mayHold reports whether the store may hold key rk (filtered): false
// only when it certainly does not.
func (f *keyFilter) mayHold(rk []byte) bool {
	if f == nil {
		return true
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cur == nil || f.cur.Test(rk)
}

// add records the filtered keys the requests' writes put (committer,
// before the snapshot holding them is published).
func (f *keyFilter) add(reqs []*request) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil && f.next == nil {
		return // the first build's scan will see them
	}
	for _, r := range reqs {
		for i := range r.writes {
			w := &r.writes[i]
			if w.del || !filtered(w.key) {
				continue
			}
			if f.next != nil && !f.next.TestAndAdd(w.key) {
				f.nextAdded++
			}
			if f.cur != nil && !f.cur.TestAndAdd(w.key) {
				f.n++
			}
		}
	}
	if f.cur != nil && f.n > f.room && f.next == nil && !f.asked {
		f.asked = true
		select {
		case f.rebuild <- struct{}{}:
		default:
		}
	}
}

// install puts k, a filter saved at the last clean close, in use as if
// a build had made it (before the committer starts).
func (f *keyFilter) install(k *savedKeyFilter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur, f.room, f.n = k.filter, uint(k.room), uint(k.n)
	f.builds++
	close(f.built)
	f.built = make(chan struct{})
}

// ready reports whether a filter is in use.
func (f *keyFilter) ready() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cur != nil
}

// build makes a new filter from the record keys of db and puts it in
// use. stop ends it early (the store is closing): it then reports false.
func (f *keyFilter) build(db *badger.DB, stop <-chan struct{}) (bool, error) {
	count, ok, err := scanFilteredKeys(db, stop, nil)
	if err != nil || !ok {
		return false, err
	}
	room := max(f.minRoom, 2*count)
	next := bloom.NewWithEstimates(room, f.fpRate)
	f.mu.Lock()
	f.next, f.asked, f.nextAdded = next, false, 0
	f.scans++
	select {
	case <-f.rebuild: // asked before this build began: it answers that
	default:
	}
	f.mu.Unlock()
	// From here on add writes to next too, and the scan below begins
	// after: a key is either added by add or seen by the scan.
	n, ok, err := scanFilteredKeys(db, stop, func(k []byte) {
		f.mu.Lock()
		next.Add(k)
		f.mu.Unlock()
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = nil
	if err != nil || !ok {
		return false, err
	}
	f.cur, f.room, f.n = next, room, n+f.nextAdded
	f.builds++
	close(f.built)
	f.built = make(chan struct{})
	return true, nil
}

// scanFilteredKeys calls fn (when not nil) with every filtered key db
// holds, and returns how many there are; ok=false when stop closed first.
func scanFilteredKeys(db *badger.DB, stop <-chan struct{}, fn func([]byte)) (n uint, ok bool, err error) {
	err = db.View(func(txn *badger.Txn) error {
		for _, prefix := range []string{prefixRecord, prefixDedup} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
			for it.Rewind(); it.Valid(); it.Next() {
				if n%4096 == 0 {
					select {
					case <-stop:
						it.Close()
						return nil
					default:
					}
				}
				if fn != nil {
					fn(it.Item().Key())
				}
				n++
			}
			it.Close()
		}
		ok = true
		return nil
	})
	return n, ok, err
}

// waitBuilds waits until n builds have been put in use, or stop closes.
func (f *keyFilter) waitBuilds(n int, stop <-chan struct{}) bool {
	for {
		f.mu.RLock()
		got, ch := f.builds, f.built
		f.mu.RUnlock()
		if got >= n {
			return true
		}
		select {
		case <-ch:
		case <-stop:
			return false
		}
	}
}
