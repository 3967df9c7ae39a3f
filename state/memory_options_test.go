package state

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// openMemory opens a store in dir with opts (Path set) and returns what
// Badger runs with.
func openMemory(t *testing.T, opts BadgerOptions) BadgerMemory {
	t.Helper()
	opts.Path, opts.GCInterval = t.TempDir(), -1
	s, err := OpenBadger(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return s.Memory()
}

func TestBadgerRunsWithTheDocumentedMemoryDefaults(t *testing.T) {
	want := BadgerMemory{
		MemtableSize: DefaultMemtableSize, NumMemtables: DefaultNumMemtables,
		BlockCacheSize: DefaultBlockCacheSize, IndexCacheSize: DefaultIndexCacheSize,
		BaseTableSize: DefaultTableSize, NumCompactors: 2, Compression: DefaultCompression,
	}
	if got := openMemory(t, BadgerOptions{}); got != want {
		t.Errorf("Badger runs with %+v, want the defaults %+v", got, want)
	}
	// Badger's own defaults are far larger: a default left unapplied shows.
	if d := badger.DefaultOptions(""); d.MemTableSize == DefaultMemtableSize || d.BlockCacheSize == DefaultBlockCacheSize {
		t.Fatalf("Badger's defaults (%d, %d) equal ours: the test cannot tell them apart", d.MemTableSize, d.BlockCacheSize)
	}
}

func TestBadgerMemoryOptionsReachBadger(t *testing.T) {
	got := openMemory(t, BadgerOptions{MemtableSize: 4 << 20, NumMemtables: 3, BlockCacheSize: 1 << 20, IndexCacheSize: 2 << 20, TableSize: 3 << 20})
	if got.MemtableSize != 4<<20 || got.NumMemtables != 3 || got.BlockCacheSize != 1<<20 || got.IndexCacheSize != 2<<20 || got.BaseTableSize != 3<<20 {
		t.Errorf("Badger runs with %+v, want memtables 3 × 4 MiB, block cache 1 MiB, index cache 2 MiB, tables of 3 MiB", got)
	}
}

// A store whose tables were written in another compression than the
// default (Badger records it per table) reads back.
func TestStoreWrittenWithAnotherCompressionReadsBack(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	old := BadgerOptions{Path: dir, GCInterval: -1, tune: func(bo badger.Options) badger.Options {
		bo.Compression = options.ZSTD
		return bo.WithCompactL0OnClose(true)
	}}
	s, err := OpenBadger(old)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	run := writeSubmits(t, s, n, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBadger(BadgerOptions{Path: dir, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c := s.Memory().Compression; c == "zstd" {
		t.Fatalf("reopened with compression %s: the test needs the default to differ from zstd", c)
	}
	for i := 1; i <= n; i++ {
		r, err := s.Get(ctx, Key{Account: "acme", Key: fmt.Sprintf("new-%x-%d", run, i)})
		if want := fmt.Sprintf("n-%x-%d", run, i); err != nil || r.State != Accepted || r.MessageID != want {
			t.Fatalf("record %d after reopening: %v, %v; want accepted with message id %q", i, r, err, want)
		}
	}
}

// A store written with another table size (tables record their own
// layout) opens and reads back with the default.
func TestStoreWrittenWithAnotherTableSizeReadsBack(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1, MemtableSize: 1 << 20, TableSize: 64 << 10,
		noRowCache: true, noKeyFilter: true, tune: func(o badger.Options) badger.Options { return o.WithNumLevelZeroTables(1) }})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	createPaged(t, s, 0, n)
	if err := s.db.Flatten(1); err != nil { // level 0 compacted into tables of 64 KiB
		t.Fatal(err)
	}
	small := 0
	for _, ti := range s.db.Tables() {
		if ti.Level > 0 && ti.OnDiskSize <= 80<<10 {
			small++
		}
	}
	if small < 2 {
		t.Fatalf("%d tables of at most 80 KiB below level 0 (%+v): the store wrote no small tables", small, s.db.Tables())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openPaged(t, dir, time.Hour, nil, nil)
	defer s.Close()
	if got := s.Memory().BaseTableSize; got != DefaultTableSize {
		t.Fatalf("reopened with tables of %d, want the default %d", got, DefaultTableSize)
	}
	if err := readPaged(s, 0, n); err != nil {
		t.Fatal(err)
	}
}
