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
// 200–290 MB of the proxy's peak RSS, about half of it, and it grows with
// the store. No option of Badger's reads tables without mapping them.
//
// On Linux the store tells the kernel, every tablePagesEvery, that the
// pages of its tables need not stay mapped (madvise MADV_DONTNEED). For
// a shared mapping of a file that only takes them out of this process's
// page tables: the file's pages stay in the page cache (a page not yet
// written back stays dirty there), and the next read of one maps it again
// from there while it is cached (a minor fault, no read from disk; once
// the kernel has reclaimed it, a read from disk, as for any file). So what is released is
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

// A pass advises the tables created since the pass before (a table
// written is wholly mapped) and, of the others, its share of a cycle: at
// least tablePagesQuota, and enough that every table is visited in
// tablePagesCycle passes (~10 s). With ~250 tables for a million keys that
// is every table on every pass; a store of tens of thousands of tables
// (one advice costs a few µs) is visited in turns, not all every pass.
const (
	tablePagesQuota = 256
	tablePagesCycle = 40
)

// tablePager makes the passes over the tables of levels.
type tablePager struct {
	levels []badgerLevel
	closed func() bool // Badger is closing: advise no more (asked before each table)
	newest uint64      // the highest table id the last pass saw
	next   int         // where the next turn starts, among the tables in level order
	quota  int         // tablePagesQuota (tests change it)
	cycle  int         // tablePagesCycle (tests change it)
	// advised, when set (tests), is called with each table advised.
	advised func(id uint64)
}

func newTablePager(levels []badgerLevel, closed func() bool) *tablePager {
	return &tablePager{levels: levels, closed: closed, quota: tablePagesQuota, cycle: tablePagesCycle}
}

// pass advises the kernel that the pages of the tables chosen (above)
// need not stay mapped, unless Badger is closing, and returns how many
// tables it advised and the first error: of the advice, or of deleting a
// table whose last reference was the one taken here.
func (p *tablePager) pass() (int, error) {
	total := 0
	for _, l := range p.levels {
		l.mu.RLock()
		total += len(*l.tables)
		l.mu.RUnlock()
	}
	if total == 0 {
		return 0, nil
	}
	turn := max(p.quota, (total+p.cycle-1)/max(p.cycle, 1))
	if p.next >= total {
		p.next = 0
	}
	var held []*table.Table
	i, newest := 0, p.newest
	for _, l := range p.levels {
		l.mu.RLock()
		for _, t := range *l.tables {
			inTurn := (i-p.next+total)%total < turn
			i++
			if t.IsInmemory || t.MmapFile == nil || len(t.Data) == 0 || !(inTurn || t.ID() > p.newest) {
				continue
			}
			newest = max(newest, t.ID())
			t.IncrRef()
			held = append(held, t)
		}
		l.mu.RUnlock()
	}
	p.newest, p.next = newest, p.next+turn
	var first error
	n := 0
	for _, t := range held {
		var err error
		if !p.closed() {
			if err = releaseMapped(t.Data); err == nil {
				n++
				if p.advised != nil {
					p.advised(t.ID())
				}
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

// releaseTablePages starts the passes over the pages of the store's
// tables (see above) and returns what ends them (and waits for them to
// end). A failure is logged once.
func (s *BadgerStore) releaseTablePages(opts BadgerOptions) (stop func()) {
	if opts.InMemory || !releasesMapped {
		return func() {}
	}
	levels := badgerLevels(s.db)
	if levels == nil {
		s.log.Warn("state: Badger's levels were not found; the pages of its tables stay mapped (see tablepages.go)")
		return func() {}
	}
	p := newTablePager(levels, s.db.IsClosed)
	warned := false
	return every(cmp.Or(opts.tablePagesEvery, tablePagesEvery), func() bool {
		n, err := p.pass()
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
