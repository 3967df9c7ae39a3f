package state

import (
	"cmp"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"
)

// Badger (v4.9.6) maps every table file into memory (a shared mapping of
// the file) and reads it in place, and it writes a new table through its
// mapping: every page of a table written or read since the table was
// opened stays mapped into this process and counts in its RSS (RssFile),
// though it is the file's page cache. With a million records that was
// 200–280 MB of the proxy's peak RSS, about half of it, and it grows with
// the store. No option of Badger's reads tables without mapping them.
//
// unmapTablePages tells the kernel, every tablePagesEvery, that the pages
// of the store's tables need not stay mapped (madvise MADV_DONTNEED). For
// a shared mapping of a file that only takes them out of this process's
// page tables: the file's pages stay in the page cache (a page not yet
// written back stays dirty there), and the next read of one maps it again
// from there (a minor fault, no read from disk). So what is released is
// the process's hold on the pages, not the data: the kernel can reclaim
// unmapped page cache sooner than mapped pages, and the RSS an operator
// (and the kernel's OOM killer) sees is what the store used since the
// last pass, not every page it ever touched.
//
// A table must stay mapped while it is advised: a range Badger unmapped
// could meanwhile hold other memory, which MADV_DONTNEED would clear.
// So the tables are taken as Badger's own readers take them: under their
// level's read lock, with a reference (Table.IncrRef) held until the
// advice is given. A table Badger dropped from its tree meanwhile is
// deleted when that reference goes (Table.DecrRef), as after a read. The
// levels are found by name in Badger's unexported fields (the version is
// pinned in go.mod; TestTablePagesFindBadgersLevels fails if an upgrade
// renames them). Badger's Close unmaps every table whatever its
// references, so the passes must end before it: they start with the
// store's goroutines, and closing Badger (closeDB) ends them first. That
// order is the guarantee. Besides, a pass advises no more tables once
// Badger says it is closed (it says so before it flushes its memtables,
// long before it unmaps a table): that narrows the window a mistake in
// the order would open, it does not close it (check, then act).
const tablePagesEvery = 250 * time.Millisecond

// badgerLevel is one level of Badger's tree: its lock and its tables.
type badgerLevel struct {
	mu     *sync.RWMutex
	tables *[]*table.Table
}

// badgerLevels returns db's levels, or nil if this version of Badger
// keeps them elsewhere.
func badgerLevels(db *badger.DB) []badgerLevel {
	if db == nil {
		return nil
	}
	lc := reflect.ValueOf(db).Elem().FieldByName("lc")
	if !lc.IsValid() || lc.Kind() != reflect.Pointer || lc.IsNil() {
		return nil
	}
	levels := lc.Elem().FieldByName("levels")
	if !levels.IsValid() || levels.Kind() != reflect.Slice {
		return nil
	}
	out := make([]badgerLevel, 0, levels.Len())
	for i := range levels.Len() {
		h := levels.Index(i)
		if h.Kind() != reflect.Pointer || h.IsNil() {
			return nil
		}
		mu, tables := h.Elem().FieldByName("RWMutex"), h.Elem().FieldByName("tables")
		if !mu.IsValid() || mu.Type() != reflect.TypeOf(sync.RWMutex{}) ||
			!tables.IsValid() || tables.Type() != reflect.TypeOf([]*table.Table(nil)) {
			return nil
		}
		out = append(out, badgerLevel{
			mu:     (*sync.RWMutex)(unsafe.Pointer(mu.UnsafeAddr())),
			tables: (*[]*table.Table)(unsafe.Pointer(tables.UnsafeAddr())),
		})
	}
	return out
}

// unmapTablePages advises the kernel that the pages of the tables in
// levels need not stay mapped (see above), unless closed (asked before
// each table) reports that Badger is closing, and returns how many tables
// it advised and the first error: of the advice, or of deleting a table
// whose last reference was the one taken here.
func unmapTablePages(levels []badgerLevel, closed func() bool) (int, error) {
	var held []*table.Table
	for _, l := range levels {
		l.mu.RLock()
		for _, t := range *l.tables {
			if t.IsInmemory || t.MmapFile == nil || len(t.Data) == 0 {
				continue
			}
			t.IncrRef()
			held = append(held, t)
		}
		l.mu.RUnlock()
	}
	var first error
	n := 0
	for _, t := range held {
		var err error
		if !closed() {
			if err = releaseMapped(t.Data); err == nil {
				n++
			}
		}
		if derr := t.DecrRef(); err == nil {
			err = derr
		}
		if first == nil {
			first = err
		}
	}
	return n, first
}

// every runs fn every d on a goroutine of its own until fn reports false
// or the returned stop is called (stop waits for it to end; a second call
// does nothing).
func every(d time.Duration, fn func() bool) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if !fn() {
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// releaseTablePages starts the passes over the pages of the store's
// tables (see above) and returns what ends them (and waits for them to
// end). A failure is logged once.
func (s *BadgerStore) releaseTablePages(opts BadgerOptions) (stop func()) {
	if opts.InMemory {
		return func() {}
	}
	levels := badgerLevels(s.db)
	if levels == nil {
		s.log.Warn("state: Badger's levels were not found; the pages of its tables stay mapped (see tablepages.go)")
		return func() {}
	}
	warned := false
	return every(cmp.Or(opts.tablePagesEvery, tablePagesEvery), func() bool {
		n, err := unmapTablePages(levels, s.db.IsClosed)
		if err != nil && !warned {
			warned = true
			s.log.Warn("state: releasing the mapped pages of Badger's tables (logged once)", "err", err)
		}
		if opts.onTablePages != nil {
			opts.onTablePages(n)
		}
		return true
	})
}
