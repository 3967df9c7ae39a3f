package state

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// The trim reaches into Badger's unexported fields: an upgrade of Badger
// that renames or retypes them must fail here, not silently keep the
// pooled memory.
func TestAllocPoolTrimFindsBadgersPool(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if allocPoolChan(db) == nil {
		t.Fatal("Badger's allocator pool (DB.allocPool.allocCh) was not found: check allocpool.go against this Badger version")
	}
	if allocPoolChan(nil) != nil {
		t.Fatal("a nil DB has no pool")
	}
}

// grownAllocators returns n allocators as a table builder leaves them:
// grown past their first buffer.
func grownAllocators(n int) []*z.Allocator {
	as := make([]*z.Allocator, n)
	for i := range as {
		as[i] = z.NewAllocator(1<<20, "test")
		as[i].Allocate(3 << 20)
	}
	return as
}

// Allocators beyond the number kept are released (unregistered, their
// buffers left to the collector), the oldest first; those kept stay whole
// for the next builders.
func TestAllocatorsBeyondThoseKeptAreReleased(t *testing.T) {
	ch := make(chan *z.Allocator, 8)
	as := grownAllocators(5)
	for _, a := range as {
		ch <- a
	}
	var n int
	trimAllocators(ch, 2, func() { n++ })
	if n != 3 || len(ch) != 2 {
		t.Fatalf("released %d, %d left in the pool: want 3 released, 2 kept", n, len(ch))
	}
	for i, a := range as {
		if live := z.AllocatorFrom(a.Ref) != nil; live != (i >= 3) {
			t.Errorf("allocator %d live = %v: want the 3 oldest released and the 2 newest kept", i, live)
		}
	}
	trimAllocators(ch, 2, func() { n++ })
	if n != 3 {
		t.Fatalf("a pool at the number kept lost allocators: %d released", n)
	}
	for range 2 {
		(<-ch).Release()
	}
}

// With the store: allocators returned to Badger's pool beyond the two
// kept are released by the store, not kept until Badger sees two idle
// seconds (which never come under load).
func TestBadgerStoreTrimsBadgersAllocatorPool(t *testing.T) {
	var n atomic.Int64
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1, CheckpointInterval: -1,
		onAllocRelease: func() { n.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ch := allocPoolChan(s.db)
	// What Badger's AllocatorPool.Return does with six builders'
	// allocators (the store is idle: nothing takes them back out).
	for _, a := range grownAllocators(6) {
		ch <- a
	}
	// Badger's own pool gives one back after two idle seconds: with the
	// store idle that may be one of these, so three or four are ours.
	testkit.Eventually(t, 20*time.Second, func() bool { return len(ch) <= allocPoolKeep },
		"the allocators beyond the two kept stay in Badger's pool")
	if got := n.Load(); got < 3 || got > 4 {
		t.Fatalf("the store released %d allocators: want those beyond the two kept (3 or 4)", got)
	}
}

// Once Badger closes its pool's channel (DB.Close), the trim says so and
// takes nothing from it.
func TestAllocatorTrimEndsWhenThePoolCloses(t *testing.T) {
	ch := make(chan *z.Allocator, 8)
	close(ch)
	var n int
	if trimAllocators(ch, -1, func() { n++ }) {
		t.Fatal("a closed pool's channel was not reported closed")
	}
	if n != 0 {
		t.Fatalf("%d released from a closed, empty pool", n)
	}
}
