package dedup

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/pgstore"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// An instance whose lease runs out while it forwards a submit (its first
// upstream answered 0x58 and the router tries another) writes it upstream
// no more: the other instance, which took the record over as unknown and
// resent it for the client's retry, is the only one to write it again,
// and what it stored (its message id) stays.
func TestAnInstanceWhoseLeaseRanOutWritesNothingMoreUpstream(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "dedup_lease_")
	c := storetest.NewClock(time.Now())
	open := func(id string) *pgstore.Store {
		st, err := pgstore.Open(ctx, pgstore.Options{DSN: dsn, Schema: schema, Migrate: true, InstanceID: id, Lease: time.Hour, Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, b := open("a"), open("b")
	sec, _, err := a.LoadOrCreate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	firstWritten, retry := make(chan struct{}), make(chan struct{})
	var aWrites, bWrites atomic.Int32
	var secondJournal error
	fa := &fakeFwd{Answer: func(_ context.Context, n int, at *Attempt) Result {
		if err := at.Journal("up1", "up1/s1", 1); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up1"}
		}
		aWrites.Add(1)
		close(firstWritten)
		<-retry // up1 answered 0x58: the router tries up2
		if secondJournal = at.Journal("up2", "up2/s1", 2); secondJournal != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: secondJournal, Upstream: "up2", Attempts: 2}
		}
		aWrites.Add(1)
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "from-a", Upstream: "up2", Session: "up2/s1", Sequence: 2, Attempts: 2}
	}}
	ea := newTestEngine(t, Config{Store: a, Forwarder: fa, Now: c.Now, InstanceID: "a", Owners: a, Lease: a.Lease, Secret: sec})
	eb := newTestEngine(t, Config{Store: b, Forwarder: accepting(func(int) { bWrites.Add(1) }), Now: c.Now, InstanceID: "b", Owners: b, Lease: b.Lease, Secret: sec})

	done := make(chan Answer, 1)
	go func() { done <- ea.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")) }()
	<-firstWritten
	c.Advance(time.Hour + time.Second) // a's lease runs out, for a and for b; b renews and takes a's sent records
	pgtest.SetLeaseLeft(t, dsn, schema, "a", -time.Second)
	if err := b.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ExpireDeadOwners(ctx); err != nil || n != 1 {
		t.Fatalf("b.ExpireDeadOwners = %d, %v; want a's record taken", n, err)
	}
	if got := eb.Submit(ctx, "shop", Policy{OnUnknown: config.UnknownResend}, submit(t, "k", "t")); got.Status != smpp.StatusOK {
		t.Fatalf("the client's retry on b (on_unknown: resend) = %v; want it resent and accepted", got.Status)
	}
	close(retry)
	ans := <-done
	if !errors.Is(secondJournal, state.ErrLeaseLost) {
		t.Errorf("a's journal before its second upstream write = %v; want state.ErrLeaseLost", secondJournal)
	}
	if aWrites.Load() != 1 || bWrites.Load() != 1 {
		t.Errorf("written upstream by a %d times, by b %d; want once each (a before its lease ran out, b's resend)", aWrites.Load(), bWrites.Load())
	}
	if ans.Status == smpp.StatusOK {
		t.Errorf("a answered its client %v; want an error (it neither wrote the submit again nor owns it)", ans.Status)
	}
	r, err := b.Get(ctx, state.Key{Account: "shop", Key: "k:k"})
	if err != nil || r.State != state.Accepted || state.OwnerInstance(r.Owner) != "b" {
		t.Fatalf("record after both = %+v, %v; want accepted by b", r, err)
	}
}

// updateCounter counts the store's Updates.
type updateCounter struct {
	state.Store
	updates atomic.Int32
}

func (c *updateCounter) Update(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	c.updates.Add(1)
	return c.Store.Update(ctx, k, fn)
}

// A new submit whose lease lapses while it waits for an upstream slot
// (admitted just before) is answered 0x08 with nothing written: no
// release of a record that was never created, no store failure logged.
func TestANewSubmitWhoseLeaseLapsedBeforeItsJournalWritesNothing(t *testing.T) {
	var logs bytes.Buffer
	st := &updateCounter{Store: state.NewMem(time.Now)}
	var held atomic.Bool
	held.Store(true)
	f := &fakeFwd{Answer: func(_ context.Context, n int, a *Attempt) Result {
		held.Store(false) // the lease lapses while the submit waits for a slot
		if err := a.Journal("up", "up/s1", uint32(n)); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up"}
		}
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "m", Upstream: "up", Session: "up/s1", Sequence: uint32(n)}
	}}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "t", Lease: held.Load,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if a := e.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")); a.Status != smpp.StatusSysErr {
		t.Errorf("answer %v; want ESME_RSYSERR", a.Status)
	}
	if _, err := st.Get(ctx, state.Key{Account: "shop", Key: "k:k"}); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("record after the refused journal: %v; want none", err)
	}
	if n := st.updates.Load(); n != 0 {
		t.Errorf("%d store updates of a key never written; want none", n)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("logged as a store failure:\n%s", logs.String())
	}
}
