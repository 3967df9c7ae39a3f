package dedup

import (
	"context"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// An untracked submit (no key, missing_key: forward) is recorded under a
// key of its own, which must be new in every run of an instance: with a
// fixed instance_id the keys of a restarted proxy repeated the previous
// run's, and a new message was answered by an old record (the same text:
// ESME_ROK with the old message id and nothing sent; another text: a
// conflict).
func TestUntrackedSubmitsAfterARestartAreForwardedNotMatchedToTheLastRun(t *testing.T) {
	for name, text2 := range map[string]string{"other text": "your order 2 shipped", "same text": "your order 1 shipped"} {
		t.Run(name, func(t *testing.T) {
			c := newClock()
			st := state.NewMem(c.Now)
			secret := state.NewSecret([32]byte{1})
			f1 := &fakeForwarder{}
			run1 := New(Config{Store: st, Forwarder: f1, Now: c.Now, InstanceID: "node-1", Secret: secret})
			a1 := run1.Submit(ctx, "shop", Policy{}, submit(t, "", "your order 1 shipped"))
			run1.Close()
			if a1.Status != smpp.StatusOK || f1.count() != 1 {
				t.Fatalf("run 1: %+v, forwards %d", a1, f1.count())
			}
			c.Advance(time.Minute) // restarted, well within retention
			f2 := &fakeForwarder{}
			run2 := New(Config{Store: st, Forwarder: f2, Now: c.Now, InstanceID: "node-1", Secret: secret})
			defer run2.Close()
			a2 := run2.Submit(ctx, "shop", Policy{}, submit(t, "", text2))
			if a2.Outcome != OutUntracked || f2.count() != 1 || a2.Key.Key == a1.Key.Key {
				t.Errorf("run 2's first untracked submit: status %v, outcome %s, key %q (run 1's %q), forwards %d; want untracked under a new key, forwarded once",
					a2.Status, a2.Outcome, a2.Key.Key, a1.Key.Key, f2.count())
			}
		})
	}
}

// panicking journals its submit, then panics once released.
type panicking struct{ written, release chan struct{} }

func (p *panicking) Forward(ctx context.Context, a *Attempt) Result {
	if err := a.Journal("up", "up/s1", 1); err != nil {
		return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err}
	}
	close(p.written)
	<-p.release
	panic("forwarder bug")
}

// A duplicate that joined a submit whose decision panicked (a bug) is not
// told ESME_ROK: nothing was accepted, and it had no message id.
func TestJoinersOfAnOwnerThatPanickedAreNotToldItWasAccepted(t *testing.T) {
	c := newClock()
	st := state.NewMem(c.Now)
	fw := &panicking{written: make(chan struct{}), release: make(chan struct{})}
	e := newTestEngine(t, Config{Store: st, Forwarder: fw, Now: c.Now, InstanceID: "test"})
	p := Policy{InflightWait: time.Minute}
	go func() {
		defer func() { _ = recover() }() // as the ESME server recovers a handler's panic
		e.Submit(ctx, "shop", p, submit(t, "otp-1", "code 1"))
	}()
	<-fw.written
	joined := make(chan Answer)
	go func() { joined <- e.Submit(ctx, "shop", p, submit(t, "otp-1", "code 1")) }()
	k := state.Key{Account: "shop", Key: "k:otp-1"}
	testkit.Eventually(t, 10*time.Second, func() bool { return e.joinersOf(k) == 1 }, "the duplicate joined the flight")
	close(fw.release)
	if a := <-joined; a.Status == smpp.StatusOK {
		t.Errorf("the joiner of an owner that panicked was answered %v (id %q), want an error", a.Status, a.MessageID)
	}
}
