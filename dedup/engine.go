package dedup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// Answer is what the ESME gets for one submit_sm.
type Answer struct {
	Status    smpp.Status
	MessageID string
	// Outcome is the decision taken.
	Outcome Outcome
	Key     state.Key
}

// Config configures an Engine.
type Config struct {
	Store     state.Store
	Forwarder Forwarder
	Logger    *slog.Logger
	Metrics   *Metrics // nil: not counted
	// InstanceID distinguishes owners across processes and restarts.
	InstanceID string
	// Now is the clock every time decision of the engine reads (windows,
	// unknown_timeout, expiry, back-off deadlines). nil: time.Now.
	Now func() time.Time
	// IDs normalises upstream message ids for receipt matching and issues
	// proxy message ids (message_id: proxy). nil: ids are stored as the
	// upstream wrote them and every account gets upstream ids.
	IDs IDs
	// Secret keys the fingerprints (HMAC-SHA256) and the tags operators
	// see instead of them: the install's secret (state.FileSecret). nil: a
	// random secret of this Engine only (unit tests).
	Secret *state.Secret
	// Owners tells whether the instance owning a record still `sent` is
	// alive (a store shared by several instances). nil: the Store's, when
	// it implements state.OwnerLeases; else every owner is alive.
	Owners state.OwnerLeases
	// Lease reports whether this instance holds its lease on a store
	// shared by several instances; while it does not, no submit is
	// journaled, so none is written upstream (the other instances may
	// take its sent records over). nil: always (a store of one process).
	Lease func() bool
	// OwnerWriteHorizon: how long after its lease ran out a record's owner
	// may still write its outcome, during which an operator may not
	// resolve the record (OwnerWriteHorizon(); 0: persistFor plus a
	// minute).
	OwnerWriteHorizon time.Duration
	// CreateFirst: a key the engine does not remember as settled is
	// forwarded as new without a read, taking only upstream capacity free
	// at once (Attempt.NoWait; else it is read first); its create (written
	// before the PDU, see Store.Create) finds a record that exists,
	// nothing is sent, and the submit is decided again by the record the
	// create returned. For stores where a read is a round trip (a shared
	// database), it saves one per fresh submit; a retry the engine does
	// not remember costs a create attempt instead of a read. While most
	// keys it does not remember turn out to have a record (retries of what
	// another instance settled), it reads them first instead (haveRecord).
	CreateFirst bool
	// RecentAnswers is how many answers of records the engine settled it
	// remembers, so that their retries are answered without reading the
	// store (see finals). 0: finalsCap.
	RecentAnswers int
}

// recentAnswers is Config.RecentAnswers, finalsCap when not above 0.
func recentAnswers(n int) int {
	if n <= 0 {
		return finalsCap
	}
	return n
}

// Engine applies the submit decision table. Safe for concurrent use.
// Close stops its background writes.
type Engine struct {
	cfg Config
	log *slog.Logger
	now func() time.Time
	seq atomic.Uint64
	// horizon is the owner write horizon in force (ownerWriteHorizon).
	horizon atomic.Int64
	// run tells this engine's owners and untracked keys from those of the
	// instance's earlier runs (instance_id is kept across restarts, seq
	// starts again).
	run string
	mu  sync.Mutex
	fl  map[state.Key]*flight
	// started is when New ran: records with a legacy fingerprint are
	// written only by versions before the secret, so after a window past
	// this start none of them still deduplicates (legacyKey).
	started time.Time
	count   [numOutcomes]atomic.Uint64
	// finals answers retries of recently settled keys without a read.
	finals *finals
	// haveRecord: with CreateFirst, whether to read unremembered keys
	// first (see haveRecord).
	haveRecord haveRecord
	// macs holds HMACs under the secret for fingerprints (fingerprint).
	macs sync.Pool
	// owners says whether another instance owning a sent record is
	// presumed dead (owners.go).
	owners *owners

	// bgCtx is the context of the background goroutines (persistLater):
	// Close cancels it (stop) and waits for them (bg).
	bgCtx context.Context
	stop  context.CancelFunc
	bg    sync.WaitGroup
}

// flight is a submit being decided in this process; identical submits of
// the same key join it instead of racing the store.
type flight struct {
	fp   [32]byte
	done chan struct{}
	ans  Answer
	// joiners is how many duplicates joined it (guarded by Engine.mu).
	joiners int
}

// New returns an Engine.
func New(cfg Config) *Engine {
	e := &Engine{cfg: cfg, log: cfg.Logger, now: cfg.Now, fl: make(map[state.Key]*flight), finals: newFinals(recentAnswers(cfg.RecentAnswers))}
	e.bgCtx, e.stop = context.WithCancel(context.Background())
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.started = e.now()
	if e.cfg.InstanceID == "" {
		e.cfg.InstanceID = randomID()
	}
	e.run = randomID()
	e.horizon.Store(int64(cfg.OwnerWriteHorizon))
	leases := cfg.Owners
	if leases == nil {
		leases, _ = cfg.Store.(state.OwnerLeases)
	}
	e.owners = newOwners(leases, e.cfg.InstanceID, e.now)
	if e.cfg.Secret == nil {
		var b [32]byte
		_, _ = rand.Read(b[:])
		e.cfg.Secret = state.NewSecret(b)
	}
	return e
}

// Close stops the engine's background goroutines (outcome writes still
// being retried after a store error) and waits for them. A record whose
// outcome was not written stays `sent` (Recover makes it unknown at the
// next start). Call it before closing the store; Submit must not be called
// after it.
func (e *Engine) Close() {
	e.mu.Lock()
	e.stop() // under mu: no goroutine is added once Wait may run
	e.mu.Unlock()
	e.bg.Wait()
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Count returns how many submits ended with outcome.
func (e *Engine) Count(outcome Outcome) uint64 {
	if outcome >= numOutcomes {
		return 0
	}
	return e.count[outcome].Load()
}

func (e *Engine) counted(account string, a Answer) Answer {
	if a.Outcome < numOutcomes {
		e.count[a.Outcome].Add(1)
	}
	e.cfg.Metrics.submit(account, a.Outcome.String())
	return a
}

// Recover turns every record left in `sent` (its owner died with the
// process) into `unknown`. Call it once at start-up, before serving.
func (e *Engine) Recover(ctx context.Context) (int, error) {
	var keys []state.Key
	err := e.cfg.Store.ScanState(ctx, state.Sent, func(r *state.Record) bool {
		keys = append(keys, r.Key)
		return true
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		_, err := e.cfg.Store.Update(ctx, k, func(r *state.Record) error {
			if r.State != state.Sent {
				return state.ErrAbort
			}
			r.State = state.Unknown
			r.Updated = e.now()
			addEvent(r, state.Event{At: r.Updated, State: state.Unknown, Session: r.Session, Sequence: r.Sequence, Note: "proxy restarted while sent"})
			return nil
		})
		switch {
		case err == nil:
			n++
			e.log.Warn("record unknown after restart", "account", k.Account, "key", e.logKey(k.Key), "segment", k.Segment)
		case errors.Is(err, state.ErrAbort), errors.Is(err, state.ErrNotFound):
		default:
			return n, err
		}
	}
	return n, nil
}

type sessionKey struct{}

// WithSession returns ctx carrying the ESME session id, which the engine
// puts in its decision log lines.
func WithSession(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sessionKey{}, id)
}

func sessionOf(ctx context.Context) string {
	id, _ := ctx.Value(sessionKey{}).(string)
	return id
}

// Submit decides and, when this call owns the key, forwards one submit_sm.
func (e *Engine) Submit(ctx context.Context, account string, p Policy, sub *smpp.Submit) Answer {
	o, st := e.newOp(ctx, account, p, sub)
	if st != smpp.StatusOK {
		e.log.Debug("submit refused", "account", account, "session", sessionOf(ctx), "sequence", sub.Header.Sequence, "reason", "key", "status", st.String())
		return e.counted(account, Answer{Status: st, Outcome: OutInvalid})
	}
	k := o.k

	// Join an identical submit of the same key already being decided here.
	e.mu.Lock()
	cur, busy := e.fl[k]
	if busy && cur.fp == o.c.fp {
		cur.joiners++
		e.mu.Unlock()
		return e.join(ctx, account, o.p, k, cur)
	}
	// A flight of other content (a conflict in the making) is not joined:
	// this submit decides by the store, without registering a flight.
	f := &flight{fp: o.c.fp, done: make(chan struct{})}
	own := !busy
	if own {
		e.fl[k] = f
	}
	e.mu.Unlock()

	// What the joiners get if decide panics (a bug): nothing was accepted.
	a := Answer{Status: smpp.StatusSysErr, Outcome: OutStoreErr, Key: k}
	if own {
		// Even a panic below must release the joiners and the key.
		defer func() {
			e.mu.Lock()
			delete(e.fl, k)
			e.mu.Unlock()
			f.ans = a
			close(f.done)
		}()
	}
	a = o.decide(ctx)
	return e.counted(account, a)
}

func (e *Engine) join(ctx context.Context, account string, p Policy, k state.Key, f *flight) Answer {
	t := time.NewTimer(p.InflightWait)
	defer t.Stop()
	select {
	case <-f.done:
		a := f.ans
		if a.Outcome == OutForwarded {
			a.Outcome = OutJoined
		}
		e.log.Debug("duplicate joined in-flight submit", "account", k.Account, "session", sessionOf(ctx), "key", e.logKey(k.Key), "segment", k.Segment, "status", a.Status.String(), "message_id", a.MessageID)
		return e.counted(account, a)
	case <-t.C:
	case <-ctx.Done():
	}
	e.log.Debug("duplicate still in flight; throttled", "account", k.Account, "session", sessionOf(ctx), "key", e.logKey(k.Key), "segment", k.Segment)
	return e.counted(account, Answer{Status: smpp.StatusThrottled, Outcome: OutThrottled, Key: k})
}

func (e *Engine) owner() string {
	return e.cfg.InstanceID + "/" + e.run + "." + strconv.FormatUint(e.seq.Add(1), 36)
}

// Record lifetime guards.
const (
	// flightGuard: a record owned by a submit being forwarded does not
	// expire for this long, however short its retention (a fingerprint
	// window, say), so the outcome can always be written.
	flightGuard = time.Hour
	// answerGrace: once answered, a record lives at least this long (or its
	// retention, if shorter), so the ESME's immediate retry is replayed.
	answerGrace = time.Minute
	// maxHistory bounds a record's history (the first event is kept).
	maxHistory = 64
)

// expiresAfterAnswer is when a record answered at now expires.
func expiresAfterAnswer(r *state.Record, retention time.Duration, now time.Time) time.Time {
	return maxTime(r.Created.Add(retention), now.Add(min(retention, answerGrace)))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// addEvent appends ev to r's history, keeping the first event and the
// latest ones within maxHistory.
func addEvent(r *state.Record, ev state.Event) {
	r.History = append(r.History, ev)
	if n := len(r.History); n > maxHistory {
		r.History = append(r.History[:1], r.History[n-maxHistory+1:]...)
	}
}

// validityDeadline is the end of the submit's validity period, relative
// times counted from created (when the proxy first received the message).
func validityDeadline(sub *smpp.Submit, created time.Time) (time.Time, bool) {
	t, ok, err := smpp.ParseTime(sub.ValidityPeriod, created)
	if err != nil || !ok {
		return time.Time{}, false
	}
	return t, true
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
