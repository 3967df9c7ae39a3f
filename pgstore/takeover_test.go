package pgstore

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/pgtest"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// journaled is rec's next version as its owner writes it before another
// write upstream (a journal of a route retry).
func journaled(rec *state.Record, session string, seq uint32) *state.Record {
	next := rec.Clone()
	next.Session, next.Sequence = session, seq
	next.History = append(next.History, state.Event{At: rec.Updated, State: state.Sent, Session: session, Sequence: seq, Note: "journaled before write"})
	return next
}

// An instance whose lease ran out while it still forwarded a submit can
// no longer write that submit's record once another instance took it
// over (unknown, then perhaps resent and accepted there): its journal of
// a route retry and its outcome are refused, and the record keeps what
// the other instance wrote, message id and history included.
func TestTheOwnerCannotOverwriteARecordAnotherInstanceTookOver(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	c := storetest.NewClock(t0)
	const lease = time.Hour // the heartbeat never fires during the test
	a, b := openPair(t, Options{DSN: dsn, Now: c.Now, Lease: lease})
	rec := sentRecord(c.Now(), "k", "a/1", 1)
	rec.Expires = c.Now().Add(24 * time.Hour)
	mustCreate(t, a, rec)

	c.Advance(lease + time.Second) // a misses its renewals
	pgtest.SetLeaseLeft(t, dsn, a.opts.Schema, "a", -time.Second)
	if n, err := b.ExpireDeadOwners(bg); err != nil || n != 1 {
		t.Fatalf("ExpireDeadOwners = %d, %v; want a's record taken", n, err)
	}
	taken := mustGet(t, b, rec.Key)

	next := journaled(rec, "smsc/2", 9)
	if err := a.Replace(bg, rec, next); !errors.Is(err, state.ErrLeaseLost) {
		t.Errorf("a's journal over the record b made unknown, a's lease run out = %v; want state.ErrLeaseLost", err)
	}
	if got := mustGet(t, b, rec.Key); got.State != state.Unknown || got.Session != taken.Session || len(got.History) != len(taken.History) {
		t.Errorf("after a's refused journal: %s, session %s, %d events; want unknown as b left it (%s, %d events)", got.State, got.Session, len(got.History), taken.Session, len(taken.History))
	}

	// b resends it (on_unknown: resend) and stores its own outcome.
	mine := taken.Clone()
	mine.State, mine.Owner, mine.MessageID = state.Accepted, "b/7", "id-b"
	mine.History = append(mine.History, state.Event{At: c.Now(), State: state.Accepted, MessageID: "id-b", Note: "resent by b"})
	if _, err := b.Update(bg, rec.Key, func(r *state.Record) error { *r = *mine.Clone(); return nil }); err != nil {
		t.Fatal(err)
	}
	outcome := next.Clone()
	outcome.State, outcome.MessageID = state.Accepted, "id-a"
	if err := a.Replace(bg, rec, outcome); !errors.Is(err, ErrChanged) {
		t.Errorf("a's outcome over the record b accepted = %v; want ErrChanged", err)
	}
	if got := mustGet(t, b, rec.Key); got.State != state.Accepted || got.MessageID != "id-b" || got.Owner != "b/7" {
		t.Errorf("after a's refused outcome: %s, message id %q, owner %s; want b's: accepted, id-b, b/7", got.State, got.MessageID, got.Owner)
	}
}

// Two writes of one record in one batch (the journal and the outcome of a
// submit, grouped) each apply only over the version their writer held:
// the second over the first's. Over a record another instance changed,
// neither does.
func TestReplacesOfOneRecordInABatchFollowEachOther(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	c := storetest.NewClock(t0)
	s := openTest(t, Options{DSN: dsn, InstanceID: "a", Now: c.Now})
	for _, changed := range []bool{false, true} {
		rec := sentRecord(c.Now(), "k-"+map[bool]string{false: "own", true: "taken"}[changed], "a/1", 1)
		mustCreate(t, s, rec)
		if changed {
			if _, err := s.Update(bg, rec.Key, func(r *state.Record) error { r.State, r.Owner = state.Sent, "b/1"; return nil }); err != nil {
				t.Fatal(err)
			}
		}
		first := journaled(rec, "smsc/2", 2)
		second := first.Clone()
		second.State, second.MessageID = state.Accepted, "id-1"
		ops := []*replaceOp{newReplaceOp(rec, first), newReplaceOp(first, second)}
		reqs := []*request{{order: keyOrder(rec.Key), replace: ops[0]}, {order: keyOrder(rec.Key), replace: ops[1]}}
		if err := s.exec(reqs); err != nil {
			t.Fatal(err)
		}
		got := mustGet(t, s, rec.Key)
		applied := []bool{ops[0].applied, ops[1].applied}
		switch {
		case !changed && (!slices.Equal(applied, []bool{true, true}) || got.State != state.Accepted || got.MessageID != "id-1"):
			t.Errorf("own record: applied %v, stored %s %q; want both applied, accepted id-1", applied, got.State, got.MessageID)
		case changed && (!slices.Equal(applied, []bool{false, false}) || got.State != state.Sent || got.Owner != "b/1"):
			t.Errorf("record another instance holds: applied %v, stored %s of %s; want neither applied, sent of b/1", applied, got.State, got.Owner)
		}
	}
}

// The true answer of a submit its instance wrote upstream before its lease
// ran out is still stored when it comes after another instance made the
// record unknown and did nothing more with it (on_unknown: hold): the
// record's owner and state say nobody took it since. A journal over it,
// which would write the submit upstream again, is refused.
func TestAnOutcomeAfterTheLeaseRanOutSettlesTheRecordLeftUnknown(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	const lease = time.Hour // the heartbeat never fires during the test
	a, b := openPair(t, Options{DSN: dsn, Lease: lease})
	rec := sentRecord(time.Now(), "k", "a/1", 1)
	rec.Expires = time.Now().Add(24 * time.Hour)
	mustCreate(t, a, rec)
	pgtest.SetLeaseLeft(t, dsn, a.opts.Schema, "a", -time.Second)
	if n, err := b.ExpireDeadOwners(bg); err != nil || n != 1 {
		t.Fatalf("ExpireDeadOwners = %d, %v; want a's record taken", n, err)
	}
	if err := a.Replace(bg, rec, journaled(rec, "smsc/2", 2)); !errors.Is(err, state.ErrLeaseLost) {
		t.Errorf("a's journal over its record made unknown = %v; want state.ErrLeaseLost", err)
	}
	outcome := rec.Clone()
	outcome.State, outcome.MessageID = state.Accepted, "id-a"
	outcome.History = append(outcome.History, state.Event{At: time.Now(), State: state.Accepted, MessageID: "id-a", Note: "upstream answered"})
	if err := a.Replace(bg, rec, outcome); err != nil {
		t.Fatalf("a's outcome over its record left unknown = %v; want it stored", err)
	}
	got := mustGet(t, b, rec.Key)
	notes := []string{}
	for _, e := range got.History {
		notes = append(notes, string(e.State))
	}
	if got.State != state.Accepted || got.MessageID != "id-a" || !slices.Equal(notes, []string{"sent", "unknown", "accepted"}) {
		t.Errorf("record = %s %q, history %v; want accepted id-a after sent, unknown", got.State, got.MessageID, notes)
	}
}

// A new process of the same instance id (started once the first one's
// lease ran out) owns the id: the first process, cut off and back, can
// write nothing more, not even over a record the new one took over under
// the same owner name.
func TestAnOldProcessOfAnInstanceIDWritesNothingOnceAnotherHasIt(t *testing.T) {
	t.Parallel()
	old, renewed, rec := retakenByANewProcess(t)
	outcome := rec.Clone()
	outcome.State, outcome.MessageID = state.Accepted, "id-old"
	if err := old.Replace(bg, rec, outcome); !errors.Is(err, ErrInstanceInUse) {
		t.Errorf("the old process's outcome = %v; want ErrInstanceInUse", err)
	}
	if _, _, err := old.Create(bg, sentRecord(time.Now(), "fresh", "a/2", 2)); !errors.Is(err, state.ErrLeaseLost) {
		t.Errorf("the old process's create = %v; want state.ErrLeaseLost", err)
	}
	if got := mustGet(t, renewed, rec.Key); got.State != state.Sent || got.Session != "smsc/9" {
		t.Errorf("record = %s on %s; want the new process's: sent on smsc/9", got.State, got.Session)
	}
	if _, err := renewed.Get(bg, state.Key{Account: "acme", Key: "fresh"}); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("the old process's refused create left a record: %v", err)
	}
}

// A create (the journal of a new submit, after which it is written
// upstream) is refused once the lease has run out on the database's
// clock, whatever the instance's own view still says; nothing is written.
func TestACreateIsRefusedOnceTheLeaseRanOutOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: time.Hour})
	pgtest.SetLeaseLeft(t, dsn, a.opts.Schema, "a", -time.Second)
	if !a.Lease() {
		t.Fatal("the instance's own view lost the lease: the test proves nothing")
	}
	rec := sentRecord(time.Now(), "fresh", "a/1", 1)
	if _, created, err := a.Create(bg, rec); !errors.Is(err, state.ErrLeaseLost) || created {
		t.Errorf("Create after the lease ran out = created %v, %v; want state.ErrLeaseLost", created, err)
	}
	if _, err := a.Get(bg, rec.Key); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("Get of the refused create = %v; want not found", err)
	}
	if err := a.Renew(bg); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, a, rec)
}

// An old process of an instance id can no longer write through Update
// either (what the engine falls back to when a Replace failed): the
// record another process of the id retook stays that process's.
func TestAnOldProcessOfAnInstanceIDCannotUpdateEither(t *testing.T) {
	t.Parallel()
	old, renewed, rec := retakenByANewProcess(t)
	_, err := old.Update(bg, rec.Key, func(r *state.Record) error {
		r.State, r.MessageID = state.Accepted, "id-old"
		return nil
	})
	if !errors.Is(err, state.ErrTakenOver) {
		t.Errorf("the old process's Update = %v; want state.ErrTakenOver", err)
	}
	if got := mustGet(t, renewed, rec.Key); got.State != state.Sent || got.Session != "smsc/9" {
		t.Errorf("record = %s %q on %s; want the new process's: sent on smsc/9", got.State, got.MessageID, got.Session)
	}
}

// A journal written through Update (the first after a key's fingerprint
// window was renewed) needs the lease on the database's clock, as a
// create and a Replace do; an outcome does not.
func TestAJournalByUpdateNeedsTheDatabasesLease(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: time.Hour})
	rec := sentRecord(time.Now(), "k", "a/1", 1)
	rec.Session, rec.Sequence = "", 0 // renewed, not journaled yet
	mustCreate(t, a, rec)
	pgtest.SetLeaseLeft(t, dsn, a.opts.Schema, "a", -time.Second)
	_, err := a.Update(bg, rec.Key, func(r *state.Record) error {
		r.Session, r.Sequence = "smsc/2", 2
		return nil
	})
	if !errors.Is(err, state.ErrLeaseLost) {
		t.Errorf("journal by Update after the lease ran out = %v; want state.ErrLeaseLost", err)
	}
	if got := mustGet(t, a, rec.Key); got.Session != "" {
		t.Errorf("record journaled to %q; want nothing written", got.Session)
	}
	if _, err := a.Update(bg, rec.Key, func(r *state.Record) error { r.State = state.Retryable; return nil }); err != nil {
		t.Errorf("outcome by Update after the lease ran out = %v; want it stored", err)
	}
}

// retakenByANewProcess opens instance a (old), which creates a sent
// record as a/1; then, once its lease ran out, a new process of a
// (renewed), which takes that record as unknown at its start and retakes
// it, sent on smsc/9 as a/1 again (a process's owner names start over).
func retakenByANewProcess(t *testing.T) (old, renewed *Store, rec *state.Record) {
	t.Helper()
	dsn := testDSN(t)
	const lease = time.Hour // the heartbeat never fires during the test
	old = openTest(t, Options{DSN: dsn, InstanceID: "a", Lease: lease})
	rec = sentRecord(time.Now(), "k", "a/1", 1)
	rec.Expires = time.Now().Add(24 * time.Hour)
	mustCreate(t, old, rec)
	pgtest.SetLeaseLeft(t, dsn, old.opts.Schema, "a", -time.Second)
	renewed = openTest(t, Options{DSN: dsn, Schema: old.opts.Schema, InstanceID: "a", Lease: lease})
	retaken, err := renewed.Update(bg, rec.Key, func(r *state.Record) error {
		r.State, r.Session, r.Sequence = state.Sent, "smsc/9", 9
		return nil
	})
	if err != nil || retaken.Owner != "a/1" {
		t.Fatalf("the new process's retake = %+v, %v", retaken, err)
	}
	return old, renewed, rec
}
