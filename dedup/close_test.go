package dedup

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

const msgNotWrittenInTime = "outcome still not written; the record stays sent until a restart makes it unknown"

// newEngineWithStuckOutcome returns an engine whose store refuses every
// write once the SMSC has answered, after one submit whose outcome write
// is now being retried in the background.
func newEngineWithStuckOutcome(t *testing.T) (*Engine, *clock, *testkit.LogLines) {
	t.Helper()
	clk := newClock()
	mem := storetest.NewFaulty(state.NewMem(clk.Now))
	f := accepting(func(int) { mem.FailWrites(errors.New("no space left on device")) })
	lines := testkit.NewLogLines()
	e := newTestEngine(t, Config{Store: mem, Forwarder: f, Now: clk.Now, InstanceID: "stuck", Logger: slog.New(lines)})
	if a := e.Submit(ctx, "shop", Policy{}, submit(t, "k1", "hello")); a.Outcome != OutStoreErr {
		t.Fatalf("submit whose outcome could not be stored = %v %s, want store_error", a.Status, a.Outcome)
	}
	return e, clk, lines
}

// Close stops the background retries of an outcome write and returns only
// once they have ended.
func TestCloseStopsTheOutcomeRetriesAndWaitsForThem(t *testing.T) {
	e, _, lines := newEngineWithStuckOutcome(t)
	e.Close()
	if left := testkit.LeftRunning(0, "dedup.(*Engine).persistLater"); left != "" {
		t.Fatalf("outcome retries still running after Close:\n%s", left)
	}
	if n, _ := lines.Count(msgNotWrittenAtClose); n != 1 {
		t.Errorf("%q logged %d times, want once", msgNotWrittenAtClose, n)
	}
	e.Close() // a second Close is harmless
}

// The retries of an outcome write give up once persistFor has passed on
// the engine's clock, not on the wall clock.
func TestOutcomeRetriesEndWhenPersistForPassesOnTheEngineClock(t *testing.T) {
	_, clk, lines := newEngineWithStuckOutcome(t)
	if n, _ := lines.Count(msgNotWrittenInTime); n != 0 {
		t.Fatalf("gave up before the engine's clock moved (%d)", n)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		clk.Advance(persistFor)
		n, _ := lines.Count(msgNotWrittenInTime)
		return n == 1
	}, "the outcome retries gave up after persistFor on the engine clock")
	if left := testkit.LeftRunning(5*time.Second, "dedup.(*Engine).persistLater"); left != "" {
		t.Fatalf("outcome retries still running after giving up:\n%s", left)
	}
	if n, _ := lines.Count(msgNotWrittenAtClose); n != 0 {
		t.Errorf("%q logged although the engine was not closed", msgNotWrittenAtClose)
	}
}

// A submit whose outcome write fails after Close starts no background
// retry: it says so, and the record stays sent (unknown after a restart).
func TestOutcomeWriteFailingAfterCloseStartsNoRetry(t *testing.T) {
	clk := newClock()
	mem := storetest.NewFaulty(state.NewMem(clk.Now))
	lines := testkit.NewLogLines()
	var e *Engine
	f := accepting(func(int) {
		e.Close() // the proxy stops while the SMSC answers
		mem.FailWrites(errors.New("no space left on device"))
	})
	e = newTestEngine(t, Config{Store: mem, Forwarder: f, Now: clk.Now, InstanceID: "closing", Logger: slog.New(lines)})
	if a := e.Submit(ctx, "shop", Policy{}, submit(t, "k1", "hello")); a.Outcome != OutStoreErr {
		t.Fatalf("submit whose outcome could not be stored = %v %s, want store_error", a.Status, a.Outcome)
	}
	if left := testkit.LeftRunning(0, "dedup.(*Engine).persistLater"); left != "" {
		t.Fatalf("outcome retry started after Close:\n%s", left)
	}
	if n, _ := lines.Count(msgNotWrittenAtClose); n != 1 {
		t.Errorf("%q logged %d times, want once", msgNotWrittenAtClose, n)
	}
}
