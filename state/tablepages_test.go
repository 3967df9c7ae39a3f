package state

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// The passes reach into Badger's unexported fields: an upgrade of Badger
// that renames or retypes them must fail here, not silently keep every
// page of its tables mapped.
func TestTablePagesFindBadgersLevels(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, want := len(badgerLevels(db)), db.Opts().MaxLevels; got != want {
		t.Fatalf("found %d of Badger's levels, want %d: check tablepages.go against this Badger version", got, want)
	}
	if badgerLevels(nil) != nil {
		t.Fatal("a nil DB has no levels")
	}
}

// sstMappedKB returns, per table file under dir (its base name) mapped
// into this process, the kB of it resident in the mapping (the Rss of its
// mappings in /proc/self/smaps; 0 for a file mapped with no page in).
func sstMappedKB(t *testing.T, dir string) map[string]int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real // smaps names the file by its resolved path
	}
	out := map[string]int{}
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			cur = ""
			if len(fields) == 6 && strings.HasPrefix(fields[5], dir+string(os.PathSeparator)) && strings.HasSuffix(fields[5], ".sst") {
				cur = filepath.Base(fields[5])
			}
		case cur != "" && len(fields) == 3 && fields[0] == "Rss:":
			kb, err := strconv.Atoi(fields[1])
			if err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			out[cur] += kb
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sumKB adds up the kB of files in m, and reports whether every file of
// files is mapped at all.
func sumKB(m map[string]int, files []string) (kb int, allMapped bool) {
	allMapped = true
	for _, f := range files {
		v, ok := m[f]
		kb += v
		allMapped = allMapped && ok
	}
	return kb, allMapped
}

// heldTables takes every table of db's levels with a reference, as a pass
// does; release lets them go.
func heldTables(db *badger.DB) (tables []*table.Table, release func()) {
	for _, l := range badgerLevels(db) {
		l.mu.RLock()
		for _, t := range *l.tables {
			t.IncrRef()
			tables = append(tables, t)
		}
		l.mu.RUnlock()
	}
	return tables, func() {
		for _, t := range tables {
			_ = t.DecrRef()
		}
	}
}

// pagedRecord is a record of ~1 KB: a few thousand of them make tables
// of several pages each.
func pagedRecord(i int, now time.Time) *Record {
	k := Key{Account: "acme", Key: fmt.Sprintf("key-%06d", i)}
	return &Record{Key: k, State: Sent, Owner: strings.Repeat(fmt.Sprintf("owner-%06d.", i), 80),
		MessageID: fmt.Sprintf("m%d", i), Created: now, Updated: now, Expires: now.Add(time.Hour)}
}

func createPaged(t *testing.T, s *BadgerStore, from, to int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := from + w; i < to; i += 8 {
				if _, created, err := s.Create(ctx, pagedRecord(i, time.Now())); err != nil || !created {
					errs <- fmt.Errorf("Create(%d) = %v, %v", i, created, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// readPaged reads records from..to-1 back and reports the first that is
// not what createPaged wrote.
func readPaged(s *BadgerStore, from, to int) error {
	for i := from; i < to; i++ {
		want := pagedRecord(i, time.Now())
		got, err := s.Get(context.Background(), want.Key)
		if err != nil {
			return fmt.Errorf("Get(%v) = %v", want.Key, err)
		}
		if got.Owner != want.Owner || got.MessageID != want.MessageID || got.State != Sent {
			return fmt.Errorf("record %d read back as owner %.20q…, id %q, %s: want what was written", i, got.Owner, got.MessageID, got.State)
		}
	}
	return nil
}

// openPaged opens a store of small memtables (many tables), its reads
// answered by Badger, with the passes over its tables every passEvery.
func openPaged(t *testing.T, dir string, passEvery time.Duration, onPass func(int), tune func(badger.Options) badger.Options) *BadgerStore {
	t.Helper()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, CheckpointInterval: -1, MemtableSize: 1 << 20,
		noRowCache: true, noKeyFilter: true, tablePagesEvery: passEvery, onTablePages: onPass, tune: tune})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// noCompaction keeps the tables written: none is compacted away.
func noCompaction(o badger.Options) badger.Options { return o.WithNumCompactors(0) }

// sstName is the file name Badger gives table id.
func sstName(id uint64) string { return fmt.Sprintf("%06d.sst", id) }

// mappedTables fills a store with records (read once after) until it
// has at least three tables, and returns their files.
func mappedTables(t *testing.T, s *BadgerStore, n int) []string {
	t.Helper()
	createPaged(t, s, 0, n)
	testkit.Eventually(t, 20*time.Second, func() bool { return len(s.db.Tables()) >= 3 },
		"the records written fill no three tables")
	if err := readPaged(s, 0, n); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, ti := range s.db.Tables() {
		files = append(files, sstName(ti.ID))
	}
	return files
}

// A pass takes the pages of the store's tables out of the process (they
// no longer count in its RSS), and every record reads back as written
// afterwards, from the same files.
func TestTablePagesLeaveTheProcessAndRecordsReadBack(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the pages are released on Linux only")
	}
	dir := t.TempDir()
	s := openPaged(t, dir, time.Hour, nil, noCompaction)
	defer s.Close()
	const n = 6000
	files := mappedTables(t, s, n)
	// Every table was written through its mapping and read: its pages
	// are mapped until a pass.
	before := sstMappedKB(t, dir)
	total, all := sumKB(before, files)
	if total == 0 || !all {
		t.Fatalf("%d kB of the %d tables mapped before a pass, every one mapped: %v (smaps: %v): the test sees no mapping", total, len(files), all, before)
	}
	// Once Badger says it is closing, a pass advises no table.
	if n, err := newTablePager(badgerLevels(s.db), func() bool { return true }).pass(); n != 0 || err != nil {
		t.Fatalf("a pass with Badger closing advised %d tables, err %v: want none", n, err)
	}
	if kept, _ := sumKB(sstMappedKB(t, dir), files); kept != total {
		t.Fatalf("%d kB of the tables mapped after a pass with Badger closing, %d before: want them left alone", kept, total)
	}
	advised, err := newTablePager(badgerLevels(s.db), s.db.IsClosed).pass()
	if err != nil || advised < len(files) {
		t.Fatalf("a pass advised %d tables, err %v: want at least the store's %d, no error", advised, err, len(files))
	}
	after := sstMappedKB(t, dir)
	for _, f := range files {
		if kb := after[f]; kb != 0 {
			t.Errorf("table %s still has %d kB mapped after a pass (%d kB before)", f, kb, before[f])
		}
	}
	// Read through the mappings, every table is its file, byte for byte;
	// and the records read back as written.
	tables, release := heldTables(s.db)
	defer release()
	for _, tb := range tables {
		want, err := os.ReadFile(tb.Filename())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tb.Data, want) {
			t.Fatalf("table %s reads %d bytes through its mapping unlike its file (%d bytes) after a pass", tb.Filename(), len(tb.Data), len(want))
		}
	}
	if err := readPaged(s, 0, n); err != nil {
		t.Fatal(err)
	}
}

// The store makes the passes itself: once it is idle, none of its
// tables' pages stays mapped.
func TestStoreReleasesTablePagesOnItsOwn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the pages are released on Linux only")
	}
	dir := t.TempDir()
	var most atomic.Int64
	s := openPaged(t, dir, 5*time.Millisecond, func(n int) {
		if int64(n) > most.Load() {
			most.Store(int64(n))
		}
	}, noCompaction)
	defer s.Close()
	files := mappedTables(t, s, 6000)
	testkit.Eventually(t, 20*time.Second, func() bool {
		kb, all := sumKB(sstMappedKB(t, dir), files)
		if !all {
			t.Fatalf("the store's tables %v are not all mapped (smaps: %v): the test sees no mapping", files, sstMappedKB(t, dir))
		}
		return kb == 0
	}, "the idle store's tables keep pages mapped")
	if got := most.Load(); got < int64(len(files)) {
		t.Fatalf("the store's passes advised at most %d tables, want its %d", got, len(files))
	}
}

// A pass holds each table it advises with a reference, as Badger's
// readers do: a table compacted away meanwhile is still deleted (its file
// removed) when the pass lets it go, and what is read meanwhile, and
// after a reopen, is what was written.
func TestTablePagesKeepCompactedTablesDeletable(t *testing.T) {
	dir := t.TempDir()
	var passes atomic.Int64
	s := openPaged(t, dir, time.Millisecond, func(int) { passes.Add(1) },
		func(o badger.Options) badger.Options { return o.WithNumLevelZeroTables(2).WithBaseTableSize(256 << 10) })
	const n = 8000
	createPaged(t, s, 0, 200)
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() { // reads the first records while tables come and go
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := readPaged(s, 0, 200); err != nil {
				t.Error(err)
				return
			}
		}
	})
	createPaged(t, s, 200, n)
	if err := s.db.Flatten(2); err != nil {
		t.Fatal(err)
	}
	seen := passes.Load()
	testkit.Eventually(t, 20*time.Second, func() bool { return passes.Load() >= seen+2 }, "no pass after the compaction")
	close(done)
	readers.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The tables Badger holds after Close are those of its manifest;
	// any other table file is one that was never deleted.
	mf, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := badger.ReplayManifestFile(mf, 0, badger.DefaultOptions(dir))
	mf.Close()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for id := range m.Tables {
		held[sstName(id)] = true
	}
	for _, f := range files {
		if !held[filepath.Base(f)] {
			t.Errorf("table file %s is not in Badger's manifest: it was compacted away and never deleted", filepath.Base(f))
		}
	}
	if len(files) != len(held) || len(held) == 0 {
		t.Errorf("%d table files on disk, Badger's manifest holds %d", len(files), len(held))
	}
	s = openPaged(t, dir, time.Hour, nil, nil)
	defer s.Close()
	if err := readPaged(s, 0, n); err != nil {
		t.Fatal(err)
	}
}

// A table compacted away while a pass holds it stays on disk until the
// pass lets it go, and is deleted then: the pass's reference is the last.
func TestAPassDeletesTheTablesCompactedAwayWhileItHeldThem(t *testing.T) {
	dir := t.TempDir()
	// No compactor runs on its own; level 0 counts as full from two
	// tables, so Flatten compacts it.
	s := openPaged(t, dir, time.Hour, nil, func(o badger.Options) badger.Options {
		return o.WithNumCompactors(0).WithNumLevelZeroTables(2)
	})
	defer s.Close()
	const n = 6000
	files := mappedTables(t, s, n)
	exists := func(f string) bool {
		_, err := os.Stat(filepath.Join(dir, f))
		return err == nil
	}
	compacted := false
	// Asked by the pass before each table, with every table held: the
	// first time, the tables are compacted away under the pass.
	closing := func() bool {
		if compacted {
			return false
		}
		compacted = true
		if err := s.db.Flatten(1); err != nil {
			t.Fatalf("Flatten = %v", err)
		}
		for _, ti := range s.db.Tables() {
			if slices.Contains(files, sstName(ti.ID)) {
				t.Fatalf("table %s is still in Badger's levels after the compaction: the test compacted nothing away", sstName(ti.ID))
			}
		}
		for _, f := range files {
			if !exists(f) {
				t.Errorf("table %s was deleted while the pass held it", f)
			}
		}
		return false
	}
	if advised, err := newTablePager(badgerLevels(s.db), closing).pass(); err != nil || advised < len(files) {
		t.Fatalf("the pass advised %d tables, err %v: want the %d it held, no error", advised, err, len(files))
	}
	for _, f := range files {
		if exists(f) {
			t.Errorf("table %s, compacted away while the pass held it, is still on disk after the pass", f)
		}
	}
	if err := readPaged(s, 0, n); err != nil {
		t.Fatal(err)
	}
}

// A pass advises the tables made since the pass before, and the others
// in turns of its quota: every one of them within a cycle.
func TestTablePassesVisitNewTablesAtOnceAndTheOthersInTurn(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the pages are released on Linux only")
	}
	s := openPaged(t, t.TempDir(), time.Hour, nil, noCompaction)
	defer s.Close()
	n := 0
	for n < 40000 && len(s.db.Tables()) < 7 { // flushes run behind the writes
		createPaged(t, s, n, n+2000)
		n += 2000
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return len(s.db.Tables()) >= 7 },
		"the records written fill no seven tables")
	tables := map[uint64]bool{}
	for _, ti := range s.db.Tables() {
		tables[ti.ID] = true
	}
	var seen []uint64
	p := newTablePager(badgerLevels(s.db), s.db.IsClosed)
	p.quota, p.cycle, p.advised = 3, 1000, func(id uint64) { seen = append(seen, id) }
	pass := func() map[uint64]int {
		seen = nil
		if _, err := p.pass(); err != nil {
			t.Fatal(err)
		}
		got := map[uint64]int{}
		for _, id := range seen {
			got[id]++
		}
		return got
	}
	// The first pass: every table is new to it.
	if got := pass(); len(got) != len(tables) {
		t.Fatalf("the first pass advised %v, want every table of %v", got, tables)
	}
	// Then turns of three (the last wrapping round to the first tables)
	// until every table had one.
	turns := map[uint64]int{}
	for range (len(tables) + 2) / 3 {
		got := pass()
		if len(got) != 3 {
			t.Fatalf("a turn advised %v: want 3 tables", got)
		}
		for id := range got {
			turns[id]++
		}
	}
	for id := range tables {
		if turns[id] == 0 {
			t.Errorf("table %d had no turn in a cycle of %d passes (turns %v)", id, (len(tables)+2)/3, turns)
		}
	}
	// Tables made since: all advised by the next pass, with its turn.
	for m := n; n < m+40000 && len(s.db.Tables()) < len(tables)+3; n += 2000 {
		createPaged(t, s, n, n+2000)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return len(s.db.Tables()) >= len(tables)+3 },
		"the records written fill no three more tables")
	got := pass()
	fresh := 0
	for _, ti := range s.db.Tables() {
		if !tables[ti.ID] {
			fresh++
			if got[ti.ID] != 1 {
				t.Errorf("table %d, made since the last pass, was advised %d times by the next, want once", ti.ID, got[ti.ID])
			}
		}
	}
	if len(got) > fresh+3 {
		t.Errorf("the pass after new tables advised %d tables: want the %d new ones and a turn of at most 3", len(got), fresh)
	}
}
