package dedup

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// An operator's resolution of a record another instance made unknown
// because its owner's lease ran out is refused while the owner may still
// write the answer its SMSC gave: taken as "not sent", the owner's
// acceptance was dropped and the client's retry sent the message again.
// Once the owner cannot write any more (the horizon passed), the
// resolution is taken, even while its instance is live again.
func TestResolvingARecordWhoseOwnerMayStillWriteIsRefused(t *testing.T) {
	dsn, schema, c, a, b, sec := twoShared(t)
	written, answer := make(chan struct{}), make(chan struct{})
	ea := newTestEngine(t, Config{Store: a, Forwarder: heldForwarder(written, answer, Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "id-a", Upstream: "up", Session: "up/s1", Sequence: 1}),
		Now: c.Now, InstanceID: "a", Lease: a.Lease, Secret: sec})
	var bWrites atomic.Int32
	eb := newTestEngine(t, Config{Store: b, Forwarder: accepting(func(int) { bWrites.Add(1) }), Now: c.Now, InstanceID: "b", Owners: b, Lease: b.Lease, Secret: sec})
	done := make(chan Answer, 1)
	go func() { done <- ea.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")) }()
	<-written
	aDiesForB(t, dsn, schema, b) // b made a's record unknown; a still waits for its SMSC
	k := state.Key{Account: "shop", Key: "k:k"}
	if _, err := eb.ResolveNotSent(ctx, k, "operator"); !errors.Is(err, ErrOwnerMayWrite) {
		t.Fatalf("resolving a record whose owner may still write = %v, want ErrOwnerMayWrite", err)
	}
	close(answer)
	<-done
	if r := eb.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")); bWrites.Load() != 0 {
		t.Errorf("the retry on b = %v, and b wrote the message %d time(s) though a's SMSC had it", r.Status, bWrites.Load())
	}

	// A record an earlier run of b left sent, made unknown when b started
	// again under the same instance id (which is live: this run's):
	// resolvable once that earlier run can no longer write.
	k2 := state.Key{Account: "shop", Key: "k:k2"}
	now := c.Now()
	rec := &state.Record{Key: k2, State: state.Unknown, Owner: "b/earlier-run.1", Upstream: "up", Created: now, Updated: now, Expires: now.Add(time.Hour),
		History: []state.Event{{At: now, State: state.Unknown, Note: state.NoteLeaseExpired}}}
	if _, ok, err := b.Create(ctx, rec); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := eb.ResolveNotSent(ctx, k2, "operator"); !errors.Is(err, ErrOwnerMayWrite) {
		t.Fatalf("resolve right after the lease ran out = %v, want ErrOwnerMayWrite", err)
	}
	c.Advance(persistFor + time.Minute) // the default horizon
	if r, err := eb.ResolveNotSent(ctx, k2, "operator"); err != nil || r.State != state.Retryable {
		t.Errorf("resolve once the owner can no longer write = %v, %v; want retryable", r, err)
	}
}

// The owner write horizon follows the upstreams' timeouts: with a long
// response_timeout, a record made unknown by a lapsed lease is not
// resolvable before the owner's answer could have come and been written.
func TestTheOwnerWriteHorizonCoversTheLongestForward(t *testing.T) {
	c := newClock()
	st := state.NewMem(c.Now)
	horizon := OwnerWriteHorizon(5 * time.Minute) // response_timeout 5m
	e := newTestEngine(t, Config{Store: st, Forwarder: accepting(nil), Now: c.Now, InstanceID: "b", OwnerWriteHorizon: horizon})
	k := state.Key{Account: "shop", Key: "k:k"}
	now := c.Now()
	if _, ok, err := st.Create(ctx, &state.Record{Key: k, State: state.Unknown, Owner: "a/r.1", Upstream: "up", Created: now, Updated: now, Expires: now.Add(time.Hour),
		History: []state.Event{{At: now, State: state.Unknown, Note: state.NoteLeaseExpired}}}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	c.Advance(persistFor + 2*time.Minute) // past the default horizon, within this one
	if _, err := e.ResolveNotSent(ctx, k, "operator"); !errors.Is(err, ErrOwnerMayWrite) {
		t.Fatalf("resolve within the horizon of a 5m response_timeout = %v, want ErrOwnerMayWrite", err)
	}
	c.Advance(horizon)
	if r, err := e.ResolveNotSent(ctx, k, "operator"); err != nil || r.State != state.Retryable {
		t.Errorf("resolve past the horizon = %v, %v; want retryable", r, err)
	}
}
