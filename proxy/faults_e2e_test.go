package proxy

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/peer/sim"
	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// Temporary upstream errors are retried inside the proxy.
func TestTemporaryErrorsAreRetriedInternally(t *testing.T) {
	smsc := startSim(t, sim.Config{Fault: func(c sim.Call) sim.Action {
		if c.KeyCount <= 2 {
			return sim.Action{Status: smpp.StatusMsgQFul}
		}
		return sim.Action{}
	}})
	app := startProxy(t, testConfig(t, smsc.Addr(), t.TempDir()))
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	r := c.submit(1, keyed("tmp-1", "hello"))
	if r.Status != 0 || r.ID == "" {
		t.Fatalf("submit = %+v, want success after the SMSC's two 0x14", r)
	}
	if got := smsc.TotalAccepted(); got != 1 {
		t.Errorf("messages accepted at the SMSC = %d, want 1", got)
	}
	if got := smsc.Total(); got != 3 {
		t.Errorf("submits seen by the SMSC = %d, want 3 (two refused, one accepted)", got)
	}
}

func TestThrottledForeverIsBoundedThenRetryable(t *testing.T) {
	var throttling atomic.Bool
	throttling.Store(true)
	smsc := startSim(t, sim.Config{Fault: faultWhile(&throttling, sim.Action{Status: smpp.StatusThrottled})})
	cfg := testConfig(t, smsc.Addr(), t.TempDir())
	cfg.Upstreams[0].Retry = config.Retry{Attempts: 3, Budget: config.Duration(5 * time.Second)}
	app := startProxy(t, cfg)
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	r := c.submit(1, keyed("thr-1", "hello"))
	if r.Status != smpp.StatusThrottled {
		t.Fatalf("submit = %v, want 0x58 relayed", r.Status)
	}
	if got := smsc.Total(); got != 3 {
		t.Errorf("attempts at the SMSC = %d, want retry.attempts = 3", got)
	}
	rec, err := app.Store().Get(t.Context(), state.Key{Account: "shop", Key: "k:thr-1"})
	if err != nil || rec.State != state.Retryable {
		t.Fatalf("record = %+v, %v; want retryable", rec, err)
	}
	throttling.Store(false)
	r2 := c.submit(2, keyed("thr-1", "hello"))
	if r2.Status != 0 || r2.ID == "" {
		t.Errorf("later retry = %+v, want forwarded and accepted", r2)
	}
	if got, all := smsc.TotalAccepted(), smsc.Total(); got != 1 || all != 4 {
		t.Errorf("at the SMSC: %d accepted of %d, want 1 of 4 (3 throttled + 1)", got, all)
	}
	if rec, err := app.Store().Get(t.Context(), state.Key{Account: "shop", Key: "k:thr-1"}); err != nil || rec.State != state.Accepted || rec.MessageID != r2.ID {
		t.Errorf("record after the retry = %+v, %v; want accepted with %q", rec, err, r2.ID)
	}
}

// The upstream connection is cut while 20 submits are in
// flight.
func TestConnectionCutWithTwentyInFlight(t *testing.T) {
	for _, policy := range []config.UnknownPolicy{config.UnknownHold, config.UnknownResendAfter} {
		t.Run(string(policy), func(t *testing.T) {
			var slowing atomic.Bool
			slowing.Store(true)
			smsc := startSim(t, sim.Config{Fault: faultWhile(&slowing, sim.Action{Delay: 5 * time.Second})})
			cfg := testConfig(t, smsc.Addr(), t.TempDir())
			cfg.Upstreams[0].ResponseTimeout = config.Duration(10 * time.Second)
			cfg.Accounts[0].Idempotency.OnUnknown = policy
			const unknownTimeout = 2 * time.Second
			cfg.Accounts[0].Idempotency.UnknownTimeout = config.Duration(unknownTimeout)
			clock := testkit.NewClock(time.Now())
			app := startProxyWith(t, Options{Config: cfg, Now: clock.Now})
			c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
			var wg sync.WaitGroup
			first := make([]resp, 20)
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					first[i] = c.submit(uint32(i+1), keyed(fmt.Sprintf("cut-%d", i), fmt.Sprintf("text %d", i)))
				}()
			}
			waitFor(t, 5*time.Second, "20 submits in flight at the SMSC before the cut", func() bool { return smsc.Total() >= 20 })
			if n := smsc.Total(); n != 20 {
				t.Fatalf("submits in flight at the SMSC before the cut = %d, want 20", n)
			}
			slowing.Store(false)
			smsc.KickAll()
			wg.Wait()
			for i, r := range first {
				if r.Status != smpp.StatusSysErr {
					t.Errorf("submit %d after the cut = %v, want unknown_status 0x08", i, r.Status)
				}
			}
			// Retries before unknown_timeout (the proxy's clock has not
			// moved since the cut): held under both policies.
			for i := range 20 {
				if r := c.submit(uint32(100+i), keyed(fmt.Sprintf("cut-%d", i), fmt.Sprintf("text %d", i))); r.Status != smpp.StatusSysErr {
					t.Errorf("immediate retry %d = %v, want unknown_status", i, r.Status)
				}
			}
			if got := smsc.Total(); got != 20 {
				t.Fatalf("submits at the SMSC after immediate retries = %d, want 20", got)
			}
			if err := app.WaitUpstreams(t.Context()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(unknownTimeout + time.Millisecond)
			for round := range 2 {
				for i := range 20 {
					r := c.submit(uint32(200+20*round+i), keyed(fmt.Sprintf("cut-%d", i), fmt.Sprintf("text %d", i)))
					if policy == config.UnknownHold && r.Status != smpp.StatusSysErr {
						t.Errorf("hold: retry %d = %v, want unknown_status", i, r.Status)
					}
					if policy == config.UnknownResendAfter && r.Status != 0 {
						t.Errorf("resend_after: retry %d round %d = %v, want accepted", i, round, r.Status)
					}
				}
			}
			want := int64(20)
			if policy == config.UnknownResendAfter {
				want = 40 // each resent once, and only once
			}
			if got := smsc.Total(); got != want {
				t.Errorf("submits at the SMSC = %d, want %d", got, want)
			}
		})
	}
}

// Fingerprint mode.
func TestFingerprintModeWindow(t *testing.T) {
	smsc, cfg := simConfig(t, sim.Config{})
	cfg.Accounts[0].Idempotency.Key = config.KeyFingerprint
	const window = 700 * time.Millisecond
	cfg.Accounts[0].Idempotency.FingerprintWindow = config.Duration(window)
	clock := testkit.NewClock(time.Now())
	app := startProxyWith(t, Options{Config: cfg, Now: clock.Now})
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	a := c.submit(1, keyed("", "Your code is 4711"))
	b := c.submit(2, keyed("", "Your code is 4711"))
	if a.Status != 0 || b.ID != a.ID || smsc.Total() != 1 {
		t.Fatalf("inside the window: ids %q %q, SMSC got %d; want one SMS", a.ID, b.ID, smsc.Total())
	}
	clock.Advance(window)
	cc := c.submit(3, keyed("", "Your code is 4711"))
	if cc.Status != 0 || cc.ID == a.ID || smsc.Total() != 2 {
		t.Errorf("outside the window: id %q (first %q), SMSC got %d; want a second SMS", cc.ID, a.ID, smsc.Total())
	}
}

// The store refusing a write → 0x08, nothing forwarded.
func TestStoreWriteFailureForwardsNothing(t *testing.T) {
	smsc, cfg := simConfig(t, sim.Config{})
	b, err := state.OpenBadger(state.BadgerOptions{Path: cfg.Store.Path})
	if err != nil {
		t.Fatal(err)
	}
	f := storetest.NewFaulty(b)
	app := startProxyWith(t, Options{Config: cfg, Store: f})
	f.FailWrites(errors.New("disk full"))
	c := dialBound(t, app.Addr(), smpp.CmdBindTransceiver)
	for i := range 5 {
		if r := c.submit(uint32(i+1), keyed(fmt.Sprintf("df-%d", i), "x")); r.Status != smpp.StatusSysErr {
			t.Errorf("submit with a failing store = %v, want ESME_RSYSERR", r.Status)
		}
	}
	wantSMSCTotal(t, smsc, 0)
}
