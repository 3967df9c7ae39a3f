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
	var free atomic.Uint64
	free.Store(min - 1)
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), MinFreeBytes: min, diskCheckEvery: time.Hour,
		diskFree: func(string) (uint64, bool) { return free.Load(), true }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
