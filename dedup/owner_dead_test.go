package dedup

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// fakeLeases is a state.OwnerLeases whose instances live or die as the
// test says; it counts the checks.
type fakeLeases struct {
	mu     sync.Mutex
	dead   map[string]bool
	err    error
	checks int
}

func (f *fakeLeases) InstanceLive(_ context.Context, instance string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks++
	return !f.dead[instance], f.err
}

func (f *fakeLeases) set(instance string, dead bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead[instance], f.err = dead, err
}

func (f *fakeLeases) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checks
}

// sentBy stores a record of key k9 still sent by owner, as another
// instance of a shared store leaves it while it waits upstream.
func sentBy(t *testing.T, st state.Store, clk *clock, s *smpp.Submit, key, owner string) {
	t.Helper()
	_, _, err := st.Create(ctx, &state.Record{Key: state.Key{Account: "shop", Key: "k:" + key}, Fingerprint: s.Fingerprint(), State: state.Sent, Owner: owner, Expires: clk.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
}

// A retry of a key another instance has in flight waits inflight_wait and
// is throttled while that instance is alive (a slow owner), but gets
// ESME_RSYSERR at once, and nothing forwarded, once it is presumed dead.
// The check is cached briefly: a burst of retries costs one.
func TestRetryOfADeadOwnersSentKeyGetsSysErrNotThrottled(t *testing.T) {
	f := &fakeForwarder{}
	clk := newClock()
	st := state.NewMem(clk.Now)
	leases := &fakeLeases{dead: map[string]bool{}}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, Now: clk.Now, InstanceID: "b", Owners: leases})
	s := submit(t, "k9", "text")
	sentBy(t, st, clk, s, "k9", "a/1")
	p := Policy{InflightWait: 20 * time.Millisecond}

	if got := e.Submit(ctx, "shop", p, s); got.Status != smpp.StatusThrottled || got.Outcome != OutThrottled {
		t.Errorf("retry while the owner is alive = %v (%v), want ESME_RTHROTTLED", got.Status, got.Outcome)
	}
	leases.set("a", true, nil)
	clk.Advance(ownerCheckTTL) // the cached answer ages out
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			got := e.Submit(ctx, "shop", Policy{InflightWait: time.Hour}, s)
			if got.Status != smpp.StatusSysErr || got.Outcome != OutOwnerDead {
				t.Errorf("retry once the owner is presumed dead = %v (%v), want ESME_RSYSERR (owner_dead)", got.Status, got.Outcome)
			}
			if el := time.Since(start); el > 10*time.Second {
				t.Errorf("answered after %v: a dead owner is not waited for", el)
			}
		}()
	}
	wg.Wait()
	if f.count() != 0 {
		t.Errorf("forwards = %d, want 0: the dead owner may have written it upstream", f.count())
	}
	if n := leases.count(); n > 3 {
		t.Errorf("owner checks = %d for 1 + 20 retries within the cache's life, want at most 3 (one per retry before the cache, one after it aged out)", n)
	}
	if got := e.Count(OutOwnerDead); got != 20 {
		t.Errorf("owner_dead count = %d, want 20", got)
	}
}

// This instance's own records are never judged by the lease (it is
// alive), and a failed check is no verdict: the retry waits as for a live
// owner.
func TestOwnRecordsAndFailedChecksKeepTheThrottle(t *testing.T) {
	f := &fakeForwarder{}
	clk := newClock()
	st := state.NewMem(clk.Now)
	leases := &fakeLeases{dead: map[string]bool{"b": true}}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, Now: clk.Now, InstanceID: "b", Owners: leases})
	s := submit(t, "k9", "text")
	sentBy(t, st, clk, s, "k9", "b/7")
	p := Policy{InflightWait: 20 * time.Millisecond}
	if got := e.Submit(ctx, "shop", p, s); got.Status != smpp.StatusThrottled || leases.count() != 0 {
		t.Errorf("retry of this instance's own sent record = %v after %d owner checks, want ESME_RTHROTTLED and none", got.Status, leases.count())
	}
	s2 := submit(t, "k10", "text")
	sentBy(t, st, clk, s2, "k10", "a/1")
	leases.set("a", true, errors.New("database unreachable"))
	if got := e.Submit(ctx, "shop", p, s2); got.Status != smpp.StatusThrottled {
		t.Errorf("retry when the owner check fails = %v, want ESME_RTHROTTLED (no verdict on the owner)", got.Status)
	}
	if f.count() != 0 {
		t.Errorf("forwards = %d, want 0", f.count())
	}
}

// Without OwnerLeases (a store of one process) nothing changes: the
// retry of a sent record waits and is throttled.
func TestStoreWithoutOwnerLeasesKeepsTheThrottle(t *testing.T) {
	f := &fakeForwarder{}
	e, st, clk := newEngine(t, f)
	s := submit(t, "k9", "text")
	sentBy(t, st, clk, s, "k9", "gone/1")
	if got := e.Submit(ctx, "shop", Policy{InflightWait: 20 * time.Millisecond}, s); got.Status != smpp.StatusThrottled {
		t.Errorf("retry of a sent record on a store without leases = %v, want ESME_RTHROTTLED", got.Status)
	}
}
