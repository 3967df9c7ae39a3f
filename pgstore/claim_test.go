package pgstore

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

func TestAQueuedEntryIsDeliveredByOneClaimantAtATime(t *testing.T) {
	s := openTest(t, Options{})
	now := time.Now()
	seq, _, err := s.Enqueue(bg, &state.QueueEntry{Queue: "esme/shop", Body: []byte("r"), Enqueued: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(owner string, until time.Time) bool {
		t.Helper()
		got, err := s.Claim(bg, "esme/shop", []uint64{seq}, owner, until)
		if err != nil {
			t.Fatal(err)
		}
		return len(got) == 1
	}
	if !claim("a", now.Add(time.Minute)) {
		t.Fatal("the first claim was refused")
	}
	if claim("b", now.Add(time.Minute)) {
		t.Error("b claimed an entry a holds")
	}
	if !claim("a", now.Add(2*time.Minute)) {
		t.Error("a could not extend its own claim")
	}
	// a dies: its claim runs out, b takes over.
	if !claim("a", now.Add(-time.Second)) || !claim("b", now.Add(time.Minute)) {
		t.Error("b could not claim an entry whose claim ran out")
	}
	if err := s.Ack(bg, "esme/shop", seq); err != nil {
		t.Fatal(err)
	}
	if claim("b", now.Add(time.Minute)) {
		t.Error("an acknowledged entry was claimed")
	}
}

func TestAnEnqueueOnOneInstanceNotifiesTheOther(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	a := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "a", Migrate: true})
	b := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "b"})
	// Any bytes in the name, as queue names may hold (NUL, not UTF-8).
	if q := enqueueUntilNotified(t, a, b, "esme/sh\x00op\xff"); q != "esme/sh\x00op\xff" {
		t.Fatalf("notified of queue %q, want %q", q, "esme/sh\x00op\xff")
	}
}

// enqueueUntilNotified enqueues into queue on a until b is notified of an
// enqueue (b's LISTEN may start after a first one), and returns the queue
// b was told of.
func enqueueUntilNotified(t *testing.T, a, b *Store, queue string) string {
	t.Helper()
	got := make(chan string, 4)
	b.Subscribe(func(q string) { got <- q })
	now := time.Now()
	deadline := time.After(10 * time.Second)
	for {
		if _, _, err := a.Enqueue(bg, &state.QueueEntry{Queue: queue, Body: []byte("r"), Enqueued: now, Expires: now.Add(time.Hour)}); err != nil {
			t.Fatalf("Enqueue on a schema of %d characters: %v", len(a.opts.Schema), err)
		}
		select {
		case q := <-got:
			return q
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notification of another instance's enqueue within 10s")
		}
	}
}

func TestListClaimableLeavesOutOnlyWhatAnotherOwnersRunningClaimHolds(t *testing.T) {
	s := openTest(t, Options{})
	now := time.Now()
	seqs := enqueueShop(t, s, now, 4)
	claim := func(owner string, seq uint64, until time.Time) {
		t.Helper()
		if got, err := s.Claim(bg, "esme/shop", []uint64{seq}, owner, until); err != nil || len(got) != 1 {
			t.Fatalf("claim of %d by %s: %v, %v", seq, owner, got, err)
		}
	}
	claim("b", seqs[1], now.Add(time.Minute))  // b is delivering it
	claim("a", seqs[2], now.Add(time.Minute))  // a is
	claim("b", seqs[3], now.Add(-time.Second)) // b's claim ran out
	list := func(owner string, after uint64, limit int) []uint64 {
		t.Helper()
		es, err := s.ListClaimable(bg, "esme/shop", after, limit, owner)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	if got, want := list("a", 0, 10), []uint64{seqs[0], seqs[2], seqs[3]}; !slices.Equal(got, want) {
		t.Errorf("a lists %v, want %v (all but the one b is delivering)", got, want)
	}
	if got, want := list("b", 0, 10), []uint64{seqs[0], seqs[1], seqs[3]}; !slices.Equal(got, want) {
		t.Errorf("b lists %v, want %v (its own claims, run out or not, and not the one a is delivering)", got, want)
	}
	if got, want := list("a", seqs[0], 1), []uint64{seqs[2]}; !slices.Equal(got, want) {
		t.Errorf("a lists %v after %d with limit 1, want %v: the limit counts what is listed", got, seqs[0], want)
	}
	// List itself still shows every live entry.
	all, err := s.List(bg, "esme/shop", 0, 10)
	if err != nil || len(all) != 4 {
		t.Errorf("List: %d entries, %v; want 4", len(all), err)
	}
}

// An instance that stops gives up its claims: the entries it had claimed
// and not delivered are another instance's to deliver at once, not once
// the claims run out.
func TestAnInstanceThatStopsGivesUpItsClaims(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	a := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "a", Migrate: true})
	b := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "b"})
	now := time.Now()
	seqs := enqueueShop(t, a, now, 2)
	if got, err := a.Claim(bg, "esme/shop", seqs[:1], "a", now.Add(time.Hour)); err != nil || len(got) != 1 {
		t.Fatalf("a's claim: %v, %v", got, err)
	}
	if got, err := b.Claim(bg, "esme/shop", seqs[1:], "b", now.Add(time.Hour)); err != nil || len(got) != 1 {
		t.Fatalf("b's claim: %v, %v", got, err)
	}
	if got, err := b.Claim(bg, "esme/shop", seqs[:1], "b", now.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("b claimed the entry a holds: %v, %v", got, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Claim(bg, "esme/shop", seqs[:1], "b", now.Add(time.Hour)); err != nil || len(got) != 1 {
		t.Errorf("after a stopped, b's claim of the entry a held: %v, %v; want it claimed", got, err)
	}
	// b's own claim is not a's to give up.
	c := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "c"})
	if got, err := c.Claim(bg, "esme/shop", seqs[1:], "c", now.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("c claimed the entry b holds after a stopped: %v, %v", got, err)
	}
}

// enqueueShop queues n entries in queue esme/shop at now, for an hour, and
// returns their seqs.
func enqueueShop(t *testing.T, s *Store, now time.Time, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	for range n {
		seq, _, err := s.Enqueue(bg, &state.QueueEntry{Queue: "esme/shop", Body: []byte("r"), Enqueued: now, Expires: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

// The lease is given up at Close even when giving up the claims cannot be
// done in time (a claimed entry locked by another transaction): the other
// instances take over the stopped one's sent records at once all the same.
func TestTheLeaseIsGivenUpEvenWhenReleasingTheClaimsFails(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	a := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "a", Migrate: true, Timeout: 300 * time.Millisecond})
	b := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "b"})
	now := time.Now()
	seqs := enqueueShop(t, a, now, 1)
	if got, err := a.Claim(bg, "esme/shop", seqs, "a", now.Add(time.Hour)); err != nil || len(got) != 1 {
		t.Fatalf("a's claim: %v, %v", got, err)
	}
	tx, err := b.pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(bg) }()
	if _, err := tx.Exec(bg, `SELECT 1 FROM queue_entries WHERE seq = $1 FOR UPDATE`, int64(seqs[0])); err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	if live, err := b.InstanceLive(bg, "a"); err != nil || live {
		t.Errorf("InstanceLive(a) = %v, %v after a stopped; want its lease given up", live, err)
	}
}

// Claims run on the database's clock: an instance whose clock is far
// ahead neither lists nor claims an entry whose claim another instance
// still holds, and an instance's claim lasts what it asked for whatever
// its clock says.
func TestAClaimHoldsAgainstAnInstanceWhoseClockIsAhead(t *testing.T) {
	dsn := testDSN(t)
	a := openTest(t, Options{DSN: dsn, InstanceID: "a"})
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	b := openTest(t, Options{DSN: dsn, Schema: a.opts.Schema, InstanceID: "b", Now: ahead})
	now := time.Now()
	seq, _, err := a.Enqueue(bg, &state.QueueEntry{Queue: "esme/shop", Body: []byte("r"), Enqueued: now, Expires: now.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.Claim(bg, "esme/shop", []uint64{seq}, "a", time.Now().Add(time.Minute)); err != nil || len(got) != 1 {
		t.Fatalf("a's claim = %v, %v", got, err)
	}
	if es, err := b.ListClaimable(bg, "esme/shop", 0, 10, "b"); err != nil || len(es) != 0 {
		t.Errorf("b (clock an hour ahead) lists %d entries, %v; want none: a's claim runs for a minute", len(es), err)
	}
	if got, err := b.Claim(bg, "esme/shop", []uint64{seq}, "b", ahead().Add(time.Minute)); err != nil || len(got) != 0 {
		t.Errorf("b (clock an hour ahead) claimed %v, %v; want nothing while a's claim runs", got, err)
	}
}

// A schema name as long as configuration allows (63 characters) still
// makes a channel PostgreSQL takes: with the channel named after it whole
// every enqueue failed ("channel name too long", from review), and LISTEN
// quietly truncated it. Another instance is notified all the same.
func TestAStoreOnASchemaOfTheLongestNameEnqueuesAndNotifies(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	schema += strings.Repeat("x", 63-len(schema))
	t.Cleanup(func() { exec(t, dsn, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`) })
	a := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "a", Migrate: true})
	b := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "b"})
	if q := enqueueUntilNotified(t, a, b, "esme/shop"); q != "esme/shop" {
		t.Fatalf("notified of queue %q, want esme/shop", q)
	}
}

// Two processes under the same instance id (one whose lease lapsed while
// the database was out of its reach, the other started in its place) do
// not take each other's claims for their own: the claims are written with
// the process's token. Before, the owner was the instance id alone, and
// both delivered the same entries at once (from review).
func TestTwoProcessesUnderOneInstanceIDDoNotShareClaims(t *testing.T) {
	old, replacement := openPair(t, Options{})
	now := time.Now()
	seq := enqueueShop(t, old, now, 1)[0]
	const owner = "node-1" // the dispatchers of both name the instance
	if got, err := old.Claim(bg, "esme/shop", []uint64{seq}, owner, now.Add(time.Minute)); err != nil || len(got) != 1 {
		t.Fatalf("the first process's claim = %v, %v", got, err)
	}
	if got, err := replacement.Claim(bg, "esme/shop", []uint64{seq}, owner, now.Add(time.Minute)); err != nil || len(got) != 0 {
		t.Errorf("the other process's claim of an entry the first holds = %v, %v; want none", got, err)
	}
	if l, err := replacement.ListClaimable(bg, "esme/shop", 0, 10, owner); err != nil || len(l) != 0 {
		t.Errorf("the other process lists %d entries as claimable (err %v); want none while the first's claim runs", len(l), err)
	}
	if got, err := old.Claim(bg, "esme/shop", []uint64{seq}, owner, now.Add(2*time.Minute)); err != nil || len(got) != 1 {
		t.Errorf("the first process extending its own claim = %v, %v", got, err)
	}
}
