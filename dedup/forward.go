package dedup

import (
	"context"
	"errors"
	"fmt"
	"github.com/smppproxy/smppproxy/config"
	"log/slog"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// forward sends the owned record upstream and persists the outcome before
// answering. created is when the record's operation began (validity
// periods count from it).
func (o *op) forward(ctx context.Context, created time.Time) Answer {
	e := o.e
	res := e.cfg.Forwarder.Forward(context.WithoutCancel(ctx), o.attempt(ctx, created))
	next, a, stored := o.classify(res)
	if o.pending != nil && !o.created {
		switch {
		case o.lost || o.createErr != nil:
		case o.unread:
			// Nothing free at once and nothing journaled: decide again,
			// reading the key first.
			o.lost, o.noSlot = true, true
		default:
			o.recordUnsent(ctx, res, stored)
		}
		return a
	}
	outcome := o.outcomeWrite(res, next, stored)
	rec, err := o.write(context.WithoutCancel(ctx), outcome)
	if errors.Is(err, state.ErrTakenOver) || errors.Is(err, errNotOwned) {
		// Another instance took the record over (this one's lease ran
		// out), or another process holds this instance: the record is
		// theirs, and writing again will not succeed. The client's retry
		// is answered by what they stored.
		o.upstreamLogger(res).Warn("record taken over by another instance; its outcome here is not stored, answering ESME_RSYSERR", "err", err, "outcome", string(next))
		return o.storeErr()
	}
	if err != nil {
		// The outcome could not be made durable: never claim success. It is
		// written later, so retries are answered by what happened instead
		// of waiting for an owner that is gone.
		log := o.upstreamLogger(res)
		log.Error("store refused the outcome; answering ESME_RSYSERR and retrying the write", "err", err, "outcome", string(next))
		if !e.goBackground(func() { e.persistLater(log, o.k, outcome) }) {
			log.Warn(msgNotWrittenAtClose)
		}
		return o.storeErr()
	}
	if next == state.Accepted {
		a.MessageID = rec.ClientMessageID()
	}
	e.finals.put(rec)
	// One line per submit is for debugging; an unknown outcome is what an
	// operator acts on.
	lvl := slog.LevelDebug
	if next == state.Unknown {
		lvl = slog.LevelWarn
	}
	if !e.log.Enabled(ctx, lvl) {
		return a
	}
	o.upstreamLogger(res).Log(ctx, lvl, "submit decided", "outcome", a.Outcome.String(), "state", string(next), "status", res.Status.String(), "message_id", res.MessageID, "proxy_id", rec.ProxyID, "reason", errString(res.Err))
	return a
}

// upstreamLogger is the submit's logger with where res was sent.
func (o *op) upstreamLogger(res Result) *slog.Logger {
	return o.logger().With("upstream", res.Upstream, "upstream_session", res.Session, "upstream_sequence", res.Sequence)
}

// recordUnsent stores the new key of a submit that no upstream session
// took (no bind, every window full, no route) as retryable, with the
// status its ESME got: nothing was sent, and the next submit of the key
// forwards again. Best effort: the answer does not depend on it.
func (o *op) recordUnsent(ctx context.Context, res Result, stored smpp.Status) {
	rec := o.pending
	now := o.e.now()
	rec.State, rec.Status, rec.Updated = state.Retryable, uint32(stored), now
	rec.Upstream = res.Upstream
	rec.Expires = expiresAfterAnswer(rec, o.retention, now)
	rec.History = []state.Event{{At: now, State: state.Retryable, Status: rec.Status, Note: "created; not sent: " + errString(res.Err)}}
	found, created, err := o.e.cfg.Store.Create(context.WithoutCancel(ctx), rec)
	switch {
	case err != nil:
		o.logger().Warn("store refused the record of a submit that was not sent", "err", err)
		return
	case !created:
		// The key has a record (Config.CreateFirst took it as new without
		// reading it): the submit is answered by that record instead.
		o.lost, o.found = true, found
		return
	}
	o.debug("submit not sent", "status", res.Status.String(), "reason", errString(res.Err))
}

// attempt is the forward of this submit, journaling into its record.
func (o *op) attempt(ctx context.Context, created time.Time) *Attempt {
	var keyTag uint16
	if o.p.Key == config.KeyTLV {
		keyTag = o.p.TLVTag
	}
	att := &Attempt{
		Account: o.account, Key: o.shown, Submit: o.c.sub, Segment: o.c.seg, KeyTag: keyTag,
		NoWait: o.pending != nil && o.unread,
		Journal: func(upstream, session string, seq uint32) error {
			return o.journal(ctx, upstream, session, seq)
		},
	}
	if dl, ok := validityDeadline(o.c.sub, created); ok {
		att.Deadline = dl
	}
	return att
}

// journal records, before the submit is written to upstream session
// session as sequence seq, where it goes. The first journal of a new key
// creates its record (errKeyTaken if another writer created it first);
// later ones update the record this submit owns.
//
// On a store shared by several instances (Config.Lease) the lease is
// checked before every journal, not only when the submit was admitted (a
// route retry may come after it ran out), and again once the journal is
// written: a journal that took long (a lock, a slow flush) may have
// committed when the lease had less than its margin left, or none, and
// the others may then take the record for dead. The submit is not
// written upstream then; its outcome says it was not sent.
func (o *op) journal(ctx context.Context, upstream, session string, seq uint32) error {
	// Not the ESME's context: its owner disconnecting must not make the
	// attempt "not sent" for the duplicates that joined it.
	ctx = context.WithoutCancel(ctx)
	if !o.e.leaseHeld() {
		if o.pending != nil && !o.created {
			o.createErr = errNoLease
		}
		return errNoLease
	}
	if err := o.journalWrite(ctx, upstream, session, seq); err != nil {
		return err
	}
	if !o.e.leaseHeld() {
		return errNoLease
	}
	return nil
}

// leaseHeld reports whether this instance holds its lease (Config.Lease;
// always with a store of one process).
func (e *Engine) leaseHeld() bool { return e.cfg.Lease == nil || e.cfg.Lease() }

// journalWrite is journal's write: the record's creation for a new key,
// else the update of the record this submit owns.
func (o *op) journalWrite(ctx context.Context, upstream, session string, seq uint32) error {
	e := o.e
	if rec := o.pending; rec != nil && !o.created {
		rec.Upstream, rec.Session, rec.Sequence = upstream, session, seq
		rec.History = []state.Event{{At: rec.Created, State: state.Sent, Session: session, Sequence: seq, Note: "created; journaled before write to " + upstream}}
		found, created, err := e.cfg.Store.Create(ctx, rec)
		if err == nil {
			o.observeKey(!created)
		}
		switch {
		case err != nil:
			o.createErr = err
			return err
		case !created:
			o.lost, o.found = true, found
			return errKeyTaken
		}
		o.created, o.held = true, rec
		return nil
	}
	journal := func(r *state.Record) error {
		if r.Owner != o.owner || r.State != state.Sent {
			return fmt.Errorf("dedup: record no longer owned (state %s)", r.State)
		}
		r.Upstream, r.Session, r.Sequence, r.Updated = upstream, session, seq, e.now()
		addEvent(r, state.Event{At: r.Updated, State: state.Sent, Session: session, Sequence: seq, Note: "journaled before write to " + upstream})
		return nil
	}
	_, err := o.write(ctx, journal)
	return err
}

// write applies fn to the record this submit owns and stores the result:
// a replacement of the version it holds when it holds one, without
// reading it (no other writer changes a record while its owner forwards
// it; a store shared by several instances refuses the replacement when
// another instance took the record over), else a read-modify-write. The
// written record is held from then on.
func (o *op) write(ctx context.Context, fn func(*state.Record) error) (*state.Record, error) {
	st := o.e.cfg.Store
	if o.held == nil {
		r, err := st.Update(ctx, o.k, fn)
		if err == nil {
			o.held = r
		}
		return r, err
	}
	next := o.held.Clone()
	if err := fn(next); err != nil {
		return o.held, err
	}
	if err := st.Replace(ctx, o.held, next); err != nil {
		// The write may have been applied all the same: what is stored is
		// no longer known, so later writes read it first.
		o.held = nil
		return nil, err
	}
	o.held = next
	return next, nil
}

// errNoLease: this instance does not hold its lease on the shared store
// (Config.Lease), so nothing was journaled or written upstream.
var errNoLease = fmt.Errorf("dedup: nothing forwarded: %w", state.ErrLeaseLost)

// errKeyTaken: the key of a new submit was created by another writer
// between the lookup and the create; nothing was sent.
var errKeyTaken = errors.New("dedup: key created by another writer meanwhile")

// classify maps a forward's result to the record's next state, the
// answer, and the status kept on the record (replayed to joiners).
func (o *op) classify(res Result) (state.SubmitState, Answer, smpp.Status) {
	stored := res.Status
	var next state.SubmitState
	var a Answer
	switch {
	case res.Kind == Answered && res.Status == smpp.StatusOK:
		next, a = state.Accepted, Answer{Status: smpp.StatusOK, MessageID: res.MessageID, Outcome: OutForwarded}
	case res.Kind == Answered && res.Status.Temporary():
		next, a = state.Retryable, Answer{Status: res.Status, Outcome: OutRetryable}
	case res.Kind == Answered:
		next, a = state.Rejected, Answer{Status: res.Status, Outcome: OutRejected}
	case res.Kind == NotSent:
		st := res.Status
		if st == 0 {
			st = smpp.StatusSysErr
		}
		next, a, stored = state.Retryable, Answer{Status: st, Outcome: OutRetryable}, st
		if st == smpp.StatusThrottled {
			a.Outcome = OutThrottled
		}
	default:
		next, a = state.Unknown, Answer{Status: o.p.UnknownStatus, Outcome: OutUnknown}
	}
	a.Key = o.k
	return next, a, stored
}

// outcomeWrite is the store update recording res on the record this
// submit owns (errNotOwned if it no longer does).
func (o *op) outcomeWrite(res Result, next state.SubmitState, stored smpp.Status) func(*state.Record) error {
	e := o.e
	return func(r *state.Record) error {
		// Still this submit's: sent, or made unknown meanwhile by another
		// instance that found this one's lease run out and did nothing
		// more with it (the owner would have changed): the outcome is the
		// truth that unknown stood for.
		if r.Owner != o.owner || (r.State != state.Sent && r.State != state.Unknown) {
			return errNotOwned
		}
		r.State, r.Status, r.Updated = next, uint32(stored), e.now()
		r.Expires = expiresAfterAnswer(r, o.retention, r.Updated)
		if res.Upstream != "" {
			r.Upstream = res.Upstream
		}
		if next == state.Accepted {
			r.MessageID = res.MessageID
			r.NormID = e.normID(r.Upstream, res.MessageID)
		}
		note := "upstream answered"
		switch res.Kind {
		case NotSent:
			note = "not sent: " + errString(res.Err)
		case Ambiguous:
			note = "ambiguous: " + errString(res.Err)
		}
		if res.Attempts > 1 {
			note += fmt.Sprintf(" after %d attempts", res.Attempts)
		}
		addEvent(r, state.Event{At: r.Updated, State: next, Status: uint32(res.Status), Session: res.Session, Sequence: res.Sequence, MessageID: r.MessageID, Note: note})
		return nil
	}
}

var errNotOwned = errors.New("dedup: record no longer owned")

// goBackground runs fn on a goroutine that Close stops and waits for, or
// reports false when the engine is closed.
func (e *Engine) goBackground(fn func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bgCtx.Err() != nil {
		return false
	}
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		fn()
	}()
	return true
}

// persistLater retries an outcome write that the store refused, with
// back-off, until persistFor has passed on the engine's clock; it stops
// when the write succeeds, the record is gone, no longer ours or cannot
// be read, the store is closed, or the engine is closed. Until it succeeds the record stays
// `sent` (a restart makes it unknown).
func (e *Engine) persistLater(log *slog.Logger, k state.Key, fn func(*state.Record) error) {
	delay := 10 * time.Millisecond
	deadline := e.now().Add(persistFor)
	t := time.NewTimer(delay)
	defer t.Stop()
	for e.now().Before(deadline) {
		select {
		case <-e.bgCtx.Done():
			log.Warn(msgNotWrittenAtClose)
			return
		case <-t.C:
		}
		delay = min(delay*2, 5*time.Second)
		t.Reset(delay)
		_, err := e.cfg.Store.Update(e.bgCtx, k, fn)
		switch {
		case err == nil:
			log.Warn("outcome written after an earlier store error")
			return
		case nothingToWrite(err):
			return
		case errors.Is(err, state.ErrCorrupt):
			log.Error(msgUnreadable, "err", err)
			return
		}
	}
	log.Error("outcome still not written; the record stays sent until a restart makes it unknown")
}

// nothingToWrite reports a store error after which a write of the record
// is no longer this engine's to make: the record is gone or not ours, or
// the store is closed.
func nothingToWrite(err error) bool {
	return errors.Is(err, errNotOwned) || errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrClosed) ||
		errors.Is(err, state.ErrTakenOver)
}

// msgUnreadable: what holds the key cannot be decoded (state.ErrCorrupt),
// so it is no record of this engine's to write; trying again would fail
// the same way.
const msgUnreadable = "the record under the key cannot be read (damaged, or written by a newer version); nothing written"

// persistFor bounds persistLater.
const persistFor = 2 * time.Minute

const msgNotWrittenAtClose = "outcome not written before the engine closed; the record stays sent until a restart makes it unknown"
