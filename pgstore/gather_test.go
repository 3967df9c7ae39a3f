package pgstore

import (
	"slices"
	"testing"
	"time"
)

// While one batch of writes is in flight, the next goes to a free
// committer only once it holds eagerBatch requests; smaller, it waits for
// the batch in flight to end and grows meanwhile. Nothing is left behind
// when the input closes.
func TestASmallBatchWaitsForTheOneInFlight(t *testing.T) {
	in := make(chan int)
	out := make(chan []int)
	gate := newPipeGate(4, time.Hour)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gatherBatches(in, out, 100, gate)
	}()
	recv := func() []int {
		t.Helper()
		select {
		case b := <-out:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("no batch handed out within 10s")
			return nil
		}
	}
	in <- 1
	first := recv() // nothing in flight: it goes at once
	if !slices.Equal(first, []int{1}) {
		t.Fatalf("first batch %v, want [1]", first)
	}
	// Three more while the first is in flight: below eager, kept. A
	// receive that gets them now is a failure; the send of the fourth
	// below would block if the gatherer were offering a batch instead.
	in <- 2
	in <- 3
	in <- 4
	select {
	case b := <-out:
		t.Fatalf("batch %v handed out while one is in flight and it is below eager", b)
	default:
	}
	in <- 5 // the fourth waiting: eager, it goes although the first is in flight
	if second := recv(); !slices.Equal(second, []int{2, 3, 4, 5}) {
		t.Fatalf("second batch %v, want [2 3 4 5]", second)
	}
	in <- 6
	gate.finished() // the first ends; the second is still in flight
	select {
	case b := <-out:
		t.Fatalf("batch %v handed out while the second is in flight", b)
	default:
	}
	gate.finished() // nothing in flight: the small batch goes
	if third := recv(); !slices.Equal(third, []int{6}) {
		t.Fatalf("third batch %v, want [6]", third)
	}
	in <- 7
	close(in) // the last item is still handed out once the batch in flight ends
	gate.finished()
	if last := recv(); !slices.Equal(last, []int{7}) {
		t.Fatalf("last batch %v, want [7]", last)
	}
	<-done
	if _, ok := <-out; ok {
		t.Fatal("out not closed after the input closed")
	}
}

// A batch in flight that takes long (a failed batch rerun request by
// request, a connection that hangs) holds a small next batch for maxHold
// at most: it then goes to the free committer although the first has not
// ended. (From review: the next batch waited for the slow one however
// long it took.)
func TestASlowBatchInFlightHoldsTheNextForMaxHoldAtMost(t *testing.T) {
	in := make(chan int)
	out := make(chan []int)
	gate := newPipeGate(100, 20*time.Millisecond)
	go gatherBatches(in, out, 1000, gate)
	defer close(in)
	in <- 1
	if b := <-out; !slices.Equal(b, []int{1}) {
		t.Fatalf("first batch %v, want [1]", b)
	}
	in <- 2 // the first never finishes
	select {
	case b := <-out:
		if !slices.Equal(b, []int{2}) {
			t.Fatalf("second batch %v, want [2]", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a small batch waited 10s behind a batch in flight (maxHold 20ms)")
	}
}
