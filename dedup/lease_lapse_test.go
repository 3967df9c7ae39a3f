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
	"github.com/smppproxy/smppproxy/internal/testkit"
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
	dsn, schema, c, a, b, sec := twoShared(t)
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
	if err := b.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	aDiesForB(t, dsn, schema, b)
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

// openShared opens instance id of the shared store in schema, closed when
// the test ends.
func openShared(t *testing.T, dsn, schema, id string, now func() time.Time) *pgstore.Store {
	t.Helper()
	st, err := pgstore.Open(ctx, pgstore.Options{DSN: dsn, Schema: schema, Migrate: true, InstanceID: id, Lease: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// oneShared opens instance a of a shared store (a schema of the test's
// own, clock c) and returns it with the store's secret.
func oneShared(t *testing.T) (dsn, schema string, c *testkit.Clock, a *pgstore.Store, sec *state.Secret) {
	t.Helper()
	dsn = pgtest.DSN(t)
	schema = pgtest.Schema(t, dsn, "dedup_lease_")
	c = storetest.NewClock(time.Now())
	a = openShared(t, dsn, schema, "a", c.Now)
	sec, _, err := a.LoadOrCreate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return dsn, schema, c, a, sec
}

// twoShared is oneShared with instance b of the store too.
func twoShared(t *testing.T) (dsn, schema string, c *testkit.Clock, a, b *pgstore.Store, sec *state.Secret) {
	t.Helper()
	dsn, schema, c, a, sec = oneShared(t)
	return dsn, schema, c, a, openShared(t, dsn, schema, "b", c.Now), sec
}

// aDiesForB makes instance a's lease run out (on the database's clock)
// and b take a's one sent record over as unknown.
func aDiesForB(t *testing.T, dsn, schema string, b *pgstore.Store) {
	t.Helper()
	pgtest.SetLeaseLeft(t, dsn, schema, "a", -time.Second)
	if n, err := b.ExpireDeadOwners(ctx); err != nil || n != 1 {
		t.Fatalf("b.ExpireDeadOwners = %d, %v; want a's record taken", n, err)
	}
}

// heldForwarder journals on up/s1, signals written, waits for answer, and
// answers res.
func heldForwarder(written, answer chan struct{}, res Result) *fakeFwd {
	return &fakeFwd{Answer: func(_ context.Context, n int, at *Attempt) Result {
		if err := at.Journal(res.Upstream, res.Session, res.Sequence); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: res.Upstream}
		}
		close(written)
		<-answer
		return res
	}}
}

// A process cut off from the database long enough for another to start
// with its instance id cannot store its outcome over the record the new
// process retook (the owner names repeat: a/1 in both), neither at once
// nor later in the background: the new process's answer and message id
// stand.
func TestAnOldProcessOfAnInstanceIDCannotStoreItsOutcomeOverTheNewOnes(t *testing.T) {
	dsn, schema, c, old, sec := oneShared(t)
	oldWritten, oldGo := make(chan struct{}), make(chan struct{})
	var oldLogs bytes.Buffer
	eo := New(Config{Store: old, Forwarder: heldForwarder(oldWritten, oldGo, Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "from-old", Upstream: "up", Session: "up/s1", Sequence: 1}),
		Now: c.Now, InstanceID: "a", Lease: old.Lease, Secret: sec, Logger: slog.New(slog.NewTextHandler(&oldLogs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	oldAns := make(chan Answer, 1)
	go func() { oldAns <- eo.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")) }()
	<-oldWritten

	pgtest.SetLeaseLeft(t, dsn, schema, "a", -time.Second)
	renewed := openShared(t, dsn, schema, "a", c.Now) // takes the old process's sent records as unknown
	newWritten, newGo := make(chan struct{}), make(chan struct{})
	en := newTestEngine(t, Config{Store: renewed, Forwarder: heldForwarder(newWritten, newGo, Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "from-new", Upstream: "up", Session: "up/s2", Sequence: 2}),
		Now: c.Now, InstanceID: "a", Lease: renewed.Lease, Secret: sec})
	newAns := make(chan Answer, 1)
	go func() { newAns <- en.Submit(ctx, "shop", Policy{OnUnknown: config.UnknownResend}, submit(t, "k", "t")) }()
	<-newWritten

	close(oldGo)
	if a := <-oldAns; a.Status == smpp.StatusOK {
		t.Errorf("the old process answered its client %v; want an error (the record is the new process's)", a.Status)
	}
	eo.Close() // waits for anything it left to write in the background
	if strings.Contains(oldLogs.String(), "level=ERROR") {
		t.Errorf("the old process took the refusal for a store failure (and writes again later):\n%s", oldLogs.String())
	}
	close(newGo)
	na := <-newAns
	r, err := renewed.Get(ctx, state.Key{Account: "shop", Key: "k:k"})
	if err != nil || na.Status != smpp.StatusOK || r.State != state.Accepted || r.MessageID != "from-new" {
		t.Errorf("the new process answered %v; record %+v, %v; want its accepted from-new", na.Status, r, err)
	}
}

// failReplaceOnce refuses its first Replace as a database out of reach
// would (nothing written).
type failReplaceOnce struct {
	state.Store
	failed atomic.Bool
}

func (f *failReplaceOnce) Replace(ctx context.Context, old, rec *state.Record) error {
	if f.failed.CompareAndSwap(false, true) {
		return pgstore.ErrUnavailable
	}
	return f.Store.Replace(ctx, old, rec)
}

// The answer of a submit written upstream before the lease ran out,
// whose first write failed (the database out of reach, likely why the
// lease lapsed), is stored when written again in the background, over
// the unknown another instance made of the record meanwhile.
func TestALateOutcomeWrittenInTheBackgroundSettlesTheRecordLeftUnknown(t *testing.T) {
	dsn, schema, c, a, b, sec := twoShared(t)
	written, answer := make(chan struct{}), make(chan struct{})
	ea := newTestEngine(t, Config{Store: &failReplaceOnce{Store: a}, Forwarder: heldForwarder(written, answer, Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "id-a", Upstream: "up", Session: "up/s1", Sequence: 1}),
		Now: c.Now, InstanceID: "a", Lease: a.Lease, Secret: sec})
	done := make(chan Answer, 1)
	go func() { done <- ea.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")) }()
	<-written
	aDiesForB(t, dsn, schema, b)
	close(answer)
	if ans := <-done; ans.Status != smpp.StatusSysErr {
		t.Errorf("answer while the outcome could not be written = %v; want ESME_RSYSERR", ans.Status)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		r, err := b.Get(ctx, state.Key{Account: "shop", Key: "k:k"})
		return err == nil && r.State == state.Accepted && r.MessageID == "id-a"
	}, "the outcome written in the background never settled the record left unknown")
}

// A route retry whose journal is refused because the lease ran out (the
// first upstream answered 0x58), after another instance made the record
// unknown, stores what is true: retryable, nothing accepted; no store
// failure is logged.
func TestARouteRetryRefusedForTheLeaseLeavesTheRecordRetryable(t *testing.T) {
	dsn, schema, c, a, b, sec := twoShared(t)
	firstWritten, retry := make(chan struct{}), make(chan struct{})
	fa := &fakeFwd{Answer: func(_ context.Context, n int, at *Attempt) Result {
		if err := at.Journal("up1", "up1/s1", 1); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up1"}
		}
		close(firstWritten)
		<-retry // up1 answered 0x58
		if err := at.Journal("up2", "up2/s1", 2); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up2", Attempts: 2}
		}
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "from-a", Upstream: "up2", Session: "up2/s1", Sequence: 2, Attempts: 2}
	}}
	var logs bytes.Buffer
	ea := newTestEngine(t, Config{Store: a, Forwarder: fa, Now: c.Now, InstanceID: "a", Owners: a, Lease: a.Lease, Secret: sec,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	done := make(chan Answer, 1)
	go func() { done <- ea.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")) }()
	<-firstWritten
	aDiesForB(t, dsn, schema, b)
	close(retry)
	<-done
	r, err := b.Get(ctx, state.Key{Account: "shop", Key: "k:k"})
	if err != nil || r.State != state.Retryable {
		t.Errorf("record %+v, %v; want retryable (only a 0x58 was ever answered)", r, err)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("logged as a store failure:\n%s", logs.String())
	}
}

// gatedUpdates holds every Update until gate is closed, and reports on
// refused the first that the store refused as taken over.
type gatedUpdates struct {
	state.Store
	gate    chan struct{}
	refused chan error
}

func (g *gatedUpdates) Update(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	<-g.gate
	r, err := g.Store.Update(ctx, k, fn)
	if errors.Is(err, state.ErrTakenOver) {
		select {
		case g.refused <- err:
		default:
		}
	}
	return r, err
}

// An outcome left to be written in the background (its first write
// failed) stops being retried as soon as the store says the record was
// taken over (another process of the instance id holds it now): no
// retries for minutes, no false error about a record left sent.
func TestAnOutcomeRetriedInTheBackgroundStopsOnceTheRecordIsTakenOver(t *testing.T) {
	dsn, schema, c, old, sec := oneShared(t)
	st := &gatedUpdates{Store: &failReplaceOnce{Store: old}, gate: make(chan struct{}), refused: make(chan error, 1)}
	var logs bytes.Buffer
	written, answer := make(chan struct{}), make(chan struct{})
	e := newTestEngine(t, Config{Store: st, Forwarder: heldForwarder(written, answer, Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "from-old", Upstream: "up", Session: "up/s1", Sequence: 1}),
		Now: c.Now, InstanceID: "a", Lease: old.Lease, Secret: sec, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	done := make(chan Answer, 1)
	go func() { done <- e.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")) }()
	<-written
	close(answer)
	if a := <-done; a.Status != smpp.StatusSysErr {
		t.Fatalf("answer while the outcome could not be written = %v; want ESME_RSYSERR", a.Status)
	}
	pgtest.SetLeaseLeft(t, dsn, schema, "a", -time.Second)
	openShared(t, dsn, schema, "a", c.Now) // another process of a: the record is unknown, and theirs
	close(st.gate)
	<-st.refused
	idle := make(chan struct{})
	go func() { e.bg.Wait(); close(idle) }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		select {
		case <-idle:
			return true
		default:
			return false
		}
	}, "the background write kept retrying after the store said the record was taken over")
	if strings.Contains(logs.String(), "outcome still not written") {
		t.Errorf("a false error about the record left sent:\n%s", logs.String())
	}
}

// A retry of a retryable key whose takeover reaches the database just
// after the lease ran out there (the engine's own view still held it) is
// answered 0x08 with nothing written and no store failure logged, as a
// new key's create is.
func TestATakeoverRefusedForTheLeaseIsNotAStoreFailure(t *testing.T) {
	dsn, schema, c, a, sec := oneShared(t)
	var n atomic.Int32
	f := &fakeFwd{Answer: func(_ context.Context, _ int, at *Attempt) Result {
		seq := uint32(n.Add(1))
		if err := at.Journal("up", "up/s1", seq); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up"}
		}
		return Result{Kind: Answered, Status: smpp.StatusThrottled, Upstream: "up", Session: "up/s1", Sequence: seq}
	}}
	var logs bytes.Buffer
	e := newTestEngine(t, Config{Store: a, Forwarder: f, Now: c.Now, InstanceID: "a", Lease: func() bool { return true }, Secret: sec,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if ans := e.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")); ans.Status != smpp.StatusThrottled {
		t.Fatalf("first submit = %v; want the upstream's 0x58", ans.Status)
	}
	pgtest.SetLeaseLeft(t, dsn, schema, "a", -time.Second)
	if ans := e.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")); ans.Status != smpp.StatusSysErr {
		t.Errorf("retry after the lease ran out on the database's clock = %v; want ESME_RSYSERR", ans.Status)
	}
	if n.Load() != 1 {
		t.Errorf("written upstream %d times; want once (the first submit)", n.Load())
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a lease lapse logged as a store failure:\n%s", logs.String())
	}
}

// slowJournal is a store whose creates take so long that the lease has
// less than its margin left once they are written (lapse is called then).
type slowJournal struct {
	state.Store
	lapse func()
}

func (s *slowJournal) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	found, created, err := s.Store.Create(ctx, rec)
	s.lapse()
	return found, created, err
}

// A journal that took so long that the lease lapsed meanwhile (a lock, a
// slow flush) is not followed by the write upstream: the others may
// already take the record for dead. Its outcome says it was not sent.
func TestASubmitWhoseJournalOutlastedTheLeaseIsNotWrittenUpstream(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	st := &slowJournal{Store: state.NewMem(time.Now), lapse: func() { held.Store(false) }}
	var writes atomic.Int32
	f := &fakeFwd{Answer: func(_ context.Context, n int, a *Attempt) Result {
		if err := a.Journal("up", "up/s1", uint32(n)); err != nil {
			return Result{Kind: NotSent, Status: smpp.StatusSysErr, Err: err, Upstream: "up"}
		}
		writes.Add(1)
		return Result{Kind: Answered, Status: smpp.StatusOK, MessageID: "m", Upstream: "up", Session: "up/s1", Sequence: uint32(n)}
	}}
	e := newTestEngine(t, Config{Store: st, Forwarder: f, InstanceID: "t", Lease: held.Load})
	if a := e.Submit(ctx, "shop", Policy{}, submit(t, "k", "t")); a.Status == smpp.StatusOK {
		t.Errorf("answer %v; want an error (nothing was sent)", a.Status)
	}
	if writes.Load() != 0 {
		t.Errorf("written upstream %d times after the lease lapsed during its journal; want none", writes.Load())
	}
	if r, err := st.Get(ctx, state.Key{Account: "shop", Key: "k:k"}); err != nil || r.State != state.Retryable {
		t.Errorf("record = %+v, %v; want retryable (not sent)", r, err)
	}
}
