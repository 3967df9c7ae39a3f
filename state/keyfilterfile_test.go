package state

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// createFiltered creates the records from..to-1 (filterRecord) in s.
func createFiltered(t *testing.T, s *BadgerStore, from, to int, now time.Time) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, created, err := s.Create(context.Background(), filterRecord(i, now)); err != nil || !created {
			t.Fatalf("create %d: created=%v err=%v", i, created, err)
		}
	}
}

// expectHeld checks that the filter of s says every record from..to-1
// may be held, and that a second create of each finds it.
func expectHeld(t *testing.T, s *BadgerStore, from, to int, now time.Time) {
	t.Helper()
	for i := from; i < to; i++ {
		if !s.keys.mayHold(recordKey(filterRecord(i, now).Key)) {
			t.Fatalf("the filter says key %d is absent; the store holds it", i)
		}
		if _, created, err := s.Create(context.Background(), filterRecord(i, now)); err != nil || created {
			t.Fatalf("create of held key %d: created=%v err=%v (must find the record)", i, created, err)
		}
	}
}

func openFiltered(t *testing.T, dir string) *BadgerStore {
	t.Helper()
	s, err := OpenBadger(BadgerOptions{Path: dir, keyFilterMinRoom: 4096, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func closeStore(t *testing.T, s *BadgerStore) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// savedOnce makes a store in a new directory with records 0..n-1, closed
// cleanly (its filter saved).
func savedOnce(t *testing.T, n int, now time.Time) string {
	t.Helper()
	dir := t.TempDir()
	s := openFiltered(t, dir)
	createFiltered(t, s, 0, n, now)
	waitFilterBuilds(t, s, 1)
	closeStore(t, s)
	return dir
}

// expectScanned opens dir and checks that its filter is built from a scan
// (the saved one set aside) and finds records 0..n-1.
func expectScanned(t *testing.T, dir string, n int, now time.Time) {
	t.Helper()
	s := openFiltered(t, dir)
	defer s.Close()
	waitFilterBuilds(t, s, 1)
	if st := s.keyFilterState(); st.Scans != 1 {
		t.Errorf("filter = %+v; want one built from a scan", st)
	}
	expectHeld(t, s, 0, n, now)
}

// A store closed cleanly starts again with the filter of keys held it
// closed with, without scanning every key (with a million keys the scan
// took ~2.3 s of CPU while the proxy served, and lookups of fresh keys
// searched Badger until it ended); the file is gone while the store is
// open, and the filter answers for held and never-held keys as before.
func TestARestartAfterACleanCloseUsesTheSavedFilterWithoutAScan(t *testing.T) {
	dir, now := t.TempDir(), time.Now()
	s := openFiltered(t, dir)
	createFiltered(t, s, 0, 2000, now)
	waitFilterBuilds(t, s, 1)
	closeStore(t, s)
	if _, err := os.Stat(filepath.Join(dir, KeyFilterFile)); err != nil {
		t.Fatalf("after a clean close: %v, want the saved filter", err)
	}
	s = openFiltered(t, dir)
	defer s.Close()
	waitFilterBuilds(t, s, 1)
	if st := s.keyFilterState(); st.Scans != 0 || st.Room != 4096 {
		t.Errorf("after a clean restart the filter = %+v; want the saved one (room 4096), no scan", st)
	}
	if _, err := os.Stat(filepath.Join(dir, KeyFilterFile)); !os.IsNotExist(err) {
		t.Errorf("while the store is open the saved filter's file: %v, want it removed", err)
	}
	expectHeld(t, s, 0, 2000, now)
	maybe := 0
	for i := 2000; i < 12000; i++ {
		if s.keys.mayHold(recordKey(filterRecord(i, now).Key)) {
			maybe++
		}
	}
	if maybe > 300 {
		t.Errorf("the loaded filter says %d of 10000 keys never held may be held (over 3%%)", maybe)
	}
}

// A saved filter that does not cover every key the store holds must never
// be used (a retry whose record it missed would be sent again): one saved
// before the store was written again, one damaged, one of another store.
// Each is set aside for a scan, and every key is found.
func TestASavedFilterThatMayMissKeysIsNotUsed(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name  string
		alter func(t *testing.T, dir string, old []byte) []byte
	}{
		{"saved before later writes", func(t *testing.T, dir string, old []byte) []byte { return old }},
		{"damaged", func(t *testing.T, dir string, old []byte) []byte {
			b := readFile(t, dir)
			b[len(b)/2] ^= 0x40
			return b
		}},
		{"of another store", func(t *testing.T, dir string, old []byte) []byte {
			k, err := decodeKeyFilter(readFile(t, dir))
			if err != nil {
				t.Fatal(err)
			}
			k.instance = "another-store"
			b, err := k.encode()
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := savedOnce(t, 500, now)
			old := readFile(t, dir)
			s := openFiltered(t, dir)
			createFiltered(t, s, 500, 1000, now)
			closeStore(t, s)
			if err := os.WriteFile(filepath.Join(dir, KeyFilterFile), c.alter(t, dir, old), 0o600); err != nil {
				t.Fatal(err)
			}
			expectScanned(t, dir, 1000, now)
		})
	}
}

// A store that stops without a clean close after a restart has no saved
// filter: the file was removed at open, so the next open scans, and finds
// the keys written after the restart.
func TestACrashAfterARestartLeavesNoSavedFilter(t *testing.T) {
	now := time.Now()
	dir := savedOnce(t, 500, now)
	s := openFiltered(t, dir)
	createFiltered(t, s, 500, 1000, now)
	abandon(t, s, dir)
	expectScanned(t, dir, 1000, now)
}

func readFile(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, KeyFilterFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The saved filter is read from disk at open, where a crash or a person
// may have left anything: no content may make its reader panic or
// allocate beyond the bytes there are, and a filter decoded is the one
// encoded.
func FuzzDecodeKeyFilter(f *testing.F) {
	bf := bloom.NewWithEstimates(100, 0.01)
	bf.Add([]byte("r/acme/key"))
	seed, err := savedKeyFilter{instance: "abc", commits: 7, room: 100, n: 1, filter: bf}.encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(keyFilterMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeKeyFilter(b)
		if err != nil {
			return
		}
		back, err := k.encode()
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("decoded %d bytes that encode back to %d (%v)", len(b), len(back), err)
		}
	})
}

// A saved filter whose keys this build would look for elsewhere (the
// Bloom filter library's hashing changed in an upgrade between the save
// and the load) is not used: its probe keys are not found.
func TestASavedFilterOfOtherHashingIsNotUsed(t *testing.T) {
	now := time.Now()
	dir := savedOnce(t, 500, now)
	k, err := decodeKeyFilter(readFile(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	// The same keys under other hashing: as if added by another build.
	other := bloom.New(k.filter.Cap(), k.filter.K())
	for i := range 500 {
		other.Add(append([]byte("other hashing "), recordKey(filterRecord(i, now).Key)...))
	}
	k.filter = other
	b, err := k.encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFilterFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	expectScanned(t, dir, 500, now)
}
