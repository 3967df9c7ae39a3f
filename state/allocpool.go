package state

import (
	"reflect"
	"time"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/ristretto/v2/z"
)

// Badger builds every table (a memtable flushed, a compaction's output)
// in an allocator of its own, taken from a pool of up to 8 that the DB
// keeps, and it returns the allocator to that pool whole: all the buffers
// it grew to (a compressed table holds its blocks twice, raw and
// compressed, so an allocator for a 2 MiB table grows to ~28 MiB, and one
// that flushed a memtable to more). The pool lets one go only after two
// seconds without a table built, which never happens under load. Measured
// with the store alone and a million records (BenchmarkBadgerMemory1M),
// these pooled allocators were most of the live heap: with a 128 MiB
// memory limit the collector ran without pause, 4,266 writes/s and a
// heap of 400 MB, against 15,833 writes/s and 202 MB with the pool kept
// empty. Kept empty, though, every table starts from new, zeroed buffers,
// and in the whole proxy that cost receipts ~40% more CPU each (the
// collector runs more often); two kept do as well as eight at the memory
// of two. The pool's size is not an option of Badger's (v4.9.6), so
// trimAllocPool holds it to allocPoolKeep from outside: every
// allocPoolTrimEvery it takes the allocators beyond that from the pool's
// channel and releases them (their buffers become garbage; without
// jemalloc they are Go memory).
//
// It finds the pool's channel by name in Badger's unexported fields (the
// version is pinned in go.mod; TestAllocPoolTrimFindsBadgersPool fails
// if an upgrade renames them). Receiving from a channel is synchronised,
// so taking allocators from it races with nothing: a builder that finds
// the channel empty allocates anew, as Badger's own code does. The
// trimming starts with the store's goroutines (once the commit log is
// replayed: a replay's allocators are trimmed at the first tick) and ends
// at Close, before Badger closes.
const (
	allocPoolKeep      = 2
	allocPoolTrimEvery = 100 * time.Millisecond
)

// allocPoolChan returns the channel of db's allocator pool, or nil if
// this version of Badger keeps it elsewhere.
func allocPoolChan(db *badger.DB) chan *z.Allocator {
	if db == nil {
		return nil
	}
	f := reflect.ValueOf(db).Elem().FieldByName("allocPool")
	if !f.IsValid() || f.Type() != reflect.TypeOf((*z.AllocatorPool)(nil)) {
		return nil
	}
	pool := *(**z.AllocatorPool)(unsafe.Pointer(f.UnsafeAddr()))
	if pool == nil {
		return nil
	}
	c := reflect.ValueOf(pool).Elem().FieldByName("allocCh")
	if !c.IsValid() || c.Type() != reflect.TypeOf((chan *z.Allocator)(nil)) {
		return nil
	}
	return *(*chan *z.Allocator)(unsafe.Pointer(c.UnsafeAddr()))
}

// trimAllocPool starts holding Badger's pool to allocPoolKeep allocators
// (see above) and returns what ends it (and waits for it to end); if the
// pool is not found, it says so and keeps nothing to end.
// opts.onAllocRelease, when set (tests), is called after each release.
func (s *BadgerStore) trimAllocPool(opts BadgerOptions) (stop func()) {
	ch := allocPoolChan(s.db)
	if ch == nil {
		s.log.Warn("state: Badger's pool of table-builder allocators was not found; it keeps their memory (see allocpool.go)")
		return func() {}
	}
	return every(allocPoolTrimEvery, func() bool { return trimAllocators(ch, allocPoolKeep, opts.onAllocRelease) })
}

// trimAllocators releases allocators taken from ch while it holds more
// than keep (a builder may take one meanwhile: the pool then keeps
// fewer), and reports false if it finds ch closed (Badger drains and
// closes it at DB.Close; the store stops the trimming before that, so
// this only guards the order).
func trimAllocators(ch chan *z.Allocator, keep int, released func()) bool {
	for len(ch) > keep {
		select {
		case a, ok := <-ch:
			if !ok {
				return false
			}
			a.Release()
			if released != nil {
				released()
			}
		default:
			return true // builders took the rest
		}
	}
	return true
}
