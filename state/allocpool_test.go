package state

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/smppproxy/smppproxy/internal/testkit"
)

// The drain reaches into Badger's unexported fields: an upgrade of Badger
// that renames or retypes them must fail here, not silently keep the
// pooled memory.
func TestAllocPoolDrainFindsBadgersPool(t *testing.T) {
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

// An allocator returned to the pool is released at once, not kept with
// its buffers; the drain ends when the pool is closed.
func TestAllocatorReturnedToThePoolIsReleased(t *testing.T) {
	pool := z.NewAllocatorPool(8)
	ch := make(chan *z.Allocator, 8)
	released := make(chan struct{}, 8)
	done := make(chan struct{})
	go func() {
		drainAllocators(ch, func() { released <- struct{}{} })
		close(done)
	}()
	a := pool.Get(1<<20, "test")
	a.Allocate(3 << 20) // grows past its first buffer
	ref := a.Ref
	if z.AllocatorFrom(ref) == nil {
		t.Fatal("a live allocator is not registered")
	}
	ch <- a // what Badger's AllocatorPool.Return does with a pool not full
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the returned allocator was not released")
	}
	if z.AllocatorFrom(ref) != nil {
		t.Fatal("the released allocator is still registered with its buffers")
	}
	close(ch)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain did not end when the pool's channel closed")
	}
	pool.Release()
}

// With the store: tables built while records are written (memtables of
// 1 MiB flushed) return their allocators, and every one is released
// rather than kept in Badger's pool.
func TestBadgerStoreReleasesTableBuilderAllocators(t *testing.T) {
	var n atomic.Int64
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1, CheckpointInterval: -1,
		MemtableSize: 1 << 20, onAllocRelease: func() { n.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	for i := range 20000 {
		rec := &Record{Key: Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}, State: Sent, Upstream: "smsc",
			Created: now, Updated: now, Expires: now.Add(time.Hour)}
		if _, _, err := s.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return n.Load() > 0 },
		"no table-builder allocator was released after memtables were flushed")
}
