package state

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeArrivals feeds g n arrivals gap apart on a clock of the test's.
func fakeArrivals(g *gatherer, clock *time.Time, n int, gap time.Duration) {
	for range n {
		*clock = clock.Add(gap)
		g.arrived()
	}
}

// denseGatherer is a gatherer with a 1 ms delay that has seen writes
// arrive every 100 µs in batches of several: it expects about ten more
// within its delay.
func denseGatherer(t *testing.T) *gatherer {
	t.Helper()
	clock := time.Unix(1000, 0)
	g := newGatherer(time.Millisecond, func() time.Time { return clock })
	fakeArrivals(g, &clock, 200, 100*time.Microsecond)
	for range 20 {
		if !g.ready(4, true) { // full: goes at once, and counts as a batch of 4
			t.Fatal("a full batch was held")
		}
	}
	if e := g.expected(); e < 9 || e > 10 {
		t.Fatalf("expected %d writes within 1ms at one every 100µs, want about 10", e)
	}
	return g
}

func TestWithoutACommitDelayEveryBatchGoesAtOnce(t *testing.T) {
	clock := time.Unix(1000, 0)
	g := newGatherer(0, func() time.Time { return clock })
	fakeArrivals(g, &clock, 100, time.Microsecond)
	for range 20 {
		g.ready(8, true) // batches of several writes: a delay would hold the next
	}
	if !g.ready(1, false) || g.wait() != nil {
		t.Error("without a delay a batch of one was held")
	}
}

// A saturated store's batches are full: once the recent batches carried
// 16 writes or more on average, no batch is held, however densely the
// writes arrive.
func TestBatchesAreNotHeldWhileTheRecentOnesWereFull(t *testing.T) {
	g := denseGatherer(t)
	for range 40 {
		g.ready(32, true)
	}
	if !g.ready(1, false) {
		t.Errorf("a batch of one was held after batches of 32 (average %.1f)", g.batches)
	}
}

// While writes arrive densely a small batch waits for as many as the delay
// is expected to bring, with the delay's timer running, and goes once it
// holds them; the next batch waits again.
func TestDenseWritesWaitForTheWritesExpectedWithinTheDelay(t *testing.T) {
	g := denseGatherer(t)
	e := g.expected()
	for n := 1; n < e; n++ {
		if g.ready(n, false) {
			t.Fatalf("a batch of %d went while %d were expected", n, e)
		}
		if g.wait() == nil {
			t.Fatalf("a batch of %d is held without the delay's timer", n)
		}
	}
	if !g.ready(e, false) {
		t.Fatalf("a batch of the %d expected was held", e)
	}
	if g.wait() != nil {
		t.Error("the timer still runs for a batch that went")
	}
	if g.ready(1, false) {
		t.Error("the next batch of one went at once while writes are dense")
	}
}

// A held batch goes once the delay has passed, whatever it holds, and a
// full batch never waits.
func TestAHeldBatchGoesOnceTheDelayHasPassedAndAFullOneAtOnce(t *testing.T) {
	g := denseGatherer(t)
	if g.ready(1, false) {
		t.Fatal("a batch of one went at once while writes are dense")
	}
	g.expired()
	if !g.ready(1, false) {
		t.Error("a batch that has waited the delay was held again")
	}
	if !g.ready(1, true) {
		t.Error("a full batch was held")
	}
}

// Writes too sparse to bring two more within the delay are never held.
func TestSparseWritesAreNeverHeld(t *testing.T) {
	g := denseGatherer(t)
	clock := g.last
	g.now = func() time.Time { return clock }
	fakeArrivals(g, &clock, 200, 2*time.Millisecond)
	if !g.ready(1, false) {
		t.Errorf("a write held while one arrives every 2ms (expected within 1ms: %d)", g.expected())
	}
}

// Writes that come one at a time, each once the one before is durable,
// look dense to the clock (they arrive at the pace of the commits) but
// are never held: the batches carry one write each.
func TestWritesThatComeOneAtATimeAreNeverHeld(t *testing.T) {
	clock := time.Unix(1000, 0)
	g := newGatherer(time.Millisecond, func() time.Time { return clock })
	for i := range 500 {
		fakeArrivals(g, &clock, 1, 50*time.Microsecond)
		if !g.ready(1, false) {
			t.Fatalf("write %d of a lone writer was held (expected within the delay: %d)", i, g.expected())
		}
	}
}

// A held batch to which no more writes come goes when the delay's timer
// fires.
func TestAHeldBatchGoesWhenTheDelayPassesWithNoMoreWrites(t *testing.T) {
	g := denseGatherer(t)
	if g.ready(1, false) {
		t.Fatal("a batch of one went at once while writes are dense")
	}
	select {
	case <-g.wait():
	case <-time.After(10 * time.Second):
		t.Fatal("the 1ms timer of a held batch did not fire in 10s")
	}
	g.expired()
	if !g.ready(1, false) {
		t.Error("the batch was held again after its timer fired")
	}
	g.stop()
}

// With a commit delay, a store whose writes come from many writers at
// once holds batches back for more (fewer, fuller commits), and every
// write still completes; a writer alone, each write after the one before,
// is never held.
func TestTheCommitDelayGathersConcurrentWritesAndNeverHoldsALoneWriter(t *testing.T) {
	ctx := context.Background()
	var holds atomic.Int64
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), CommitDelay: 10 * time.Millisecond, onCommitHold: func() { holds.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	for i := range 300 {
		if _, _, err := s.Create(ctx, filterRecord(i, now)); err != nil {
			t.Fatal(err)
		}
	}
	if n := holds.Load(); n != 0 {
		t.Fatalf("a lone writer's batches were held %d times", n)
	}

	var commits, ops atomic.Int64
	s.SetCommitObserver(func(n int, _ time.Duration) { commits.Add(1); ops.Add(int64(n)) })
	const writers, each = 32, 40
	var failed atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, _, err := s.Create(ctx, filterRecord(1000+w*each+i, now)); err != nil {
					failed.Add(1)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the writes of 32 writers did not all complete within a minute")
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d writers' creates failed", n)
	}
	if holds.Load() == 0 {
		t.Errorf("32 writers at once: no batch was held for more (%d writes in %d commits)", ops.Load(), commits.Load())
	}
}
