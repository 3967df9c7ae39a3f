package state

import (
	"reflect"
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
// empty. The pool is not an option of Badger's (v4.9.6), so drainAllocPool
// keeps it empty from outside: it receives every allocator returned to
// the pool and releases it (its buffers become garbage; without jemalloc
// they are Go memory). A builder then starts from a new allocator, as
// it does in Badger whenever the pool is empty.
//
// It finds the pool's channel by name in Badger's unexported fields (the
// version is pinned in go.mod; TestAllocPoolDrainFindsBadgersPool fails
// if an upgrade renames them). Receiving from a channel is synchronised,
// so taking allocators from it races with nothing: a builder that finds
// the channel empty allocates anew, as Badger's own code does. The
// receiving goroutine ends when Badger closes the channel at DB.Close.

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

// drainAllocPool starts releasing every allocator returned to db's pool
// (see above) and reports whether it found the pool. released, when not
// nil (tests), is called after each release.
func drainAllocPool(db *badger.DB, released func()) bool {
	ch := allocPoolChan(db)
	if ch == nil {
		return false
	}
	go drainAllocators(ch, released)
	return true
}

// drainAllocators releases the allocators received on ch until it is
// closed.
func drainAllocators(ch <-chan *z.Allocator, released func()) {
	for a := range ch {
		a.Release()
		if released != nil {
			released()
		}
	}
}
