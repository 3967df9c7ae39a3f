package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The first batch after open is checked, and once the disk has dropped
// below the limit, the batches accepted before the first refusal add up
// to less than 1/64 of the room the last reading saw.
func TestDiskGuardChecksTheFirstBatchAndBoundsWhatGoesAfterADrop(t *testing.T) {
	const min = 512 << 20
	s, free := openOnDisk(t, min, min-1, time.Hour)
	ctx := context.Background()
	now := time.Now()
	n := 0
	create := func(size int) error {
		n++
		_, _, err := s.Create(ctx, &Record{Key: Key{Account: "a", Key: fmt.Sprint("k", n)}, State: Sent, Created: now, Expires: now.Add(time.Hour),
			History: []Event{{At: now, Note: strings.Repeat("x", size)}}})
		return err
	}
	if err := create(10); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("first Create after open with the disk low = %v; want ErrDiskFull", err)
	}
	const room = 64 << 20 // budget 1 MiB
	free.Store(min + room)
	if err := create(10); err != nil {
		t.Fatal(err)
	}
	free.Store(min - 1)
	accepted := 0
	for i := 0; i < 1000; i++ {
		err := create(100 << 10)
		if errors.Is(err, ErrDiskFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		accepted += 100 << 10
	}
	if accepted >= room/64 {
		t.Errorf("%d bytes accepted after the disk went low; want < %d", accepted, room/64)
	}
}

// openOnDisk opens a store on a temporary directory whose free space is
// what free holds (initially initial), refusing writes below min, with the
// free space read at most every checkEvery (negative: every batch). The
// store is closed at the end of the test.
func openOnDisk(t *testing.T, min int64, initial uint64, checkEvery time.Duration) (s *BadgerStore, free *atomic.Uint64) {
	t.Helper()
	free = new(atomic.Uint64)
	free.Store(initial)
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), MinFreeBytes: min, diskCheckEvery: checkEvery,
		diskFree: func(string) (uint64, bool) { return free.Load(), true }})
	if err != nil {
		t.Fatalf("OpenBadger = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, free
}
