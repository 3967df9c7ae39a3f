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
// Once the owner cannot write any more (the horizon passed, its lease
// still out), the resolution is taken.
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

	// A record of a that stays unknown: resolvable once a can no longer write.
	k2 := state.Key{Account: "shop", Key: "k:k2"}
	now := c.Now()
	rec := &state.Record{Key: k2, State: state.Unknown, Owner: "a/x.1", Upstream: "up", Created: now, Updated: now, Expires: now.Add(time.Hour),
		History: []state.Event{{At: now, State: state.Unknown, Note: state.NoteLeaseExpired}}}
	if _, ok, err := b.Create(ctx, rec); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := eb.ResolveNotSent(ctx, k2, "operator"); !errors.Is(err, ErrOwnerMayWrite) {
		t.Fatalf("resolve right after the lease ran out = %v, want ErrOwnerMayWrite", err)
	}
	c.Advance(ownerOutcomeHorizon)
	if r, err := eb.ResolveNotSent(ctx, k2, "operator"); err != nil || r.State != state.Retryable {
		t.Errorf("resolve once the owner can no longer write = %v, %v; want retryable", r, err)
	}
}
