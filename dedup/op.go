package dedup

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"github.com/smppproxy/smppproxy/config"
	"log/slog"
	"strconv"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// op is one submit_sm being decided: the facts every step of the decision
// table needs, the way net/http keeps one response per request. The steps
// (decide, renew, takeover, waitOther, forward, releaseUnsent) are its
// methods. An op belongs to the goroutine of its Submit.
type op struct {
	e       *Engine
	account string
	p       Policy // with defaults
	c       *content
	k       state.Key
	// tracked: the key deduplicates (false: a unique key, recorded for
	// receipt routing only).
	tracked bool
	// retention is how long the record is kept (receipts are routed by
	// it); window, when set (fingerprint keys), is how long it
	// deduplicates: an older record of the key is archived and the submit
	// is a new operation.
	retention, window time.Duration
	// owner is this submit's owner token on the record (set by decide).
	owner string
	// pending is the record of a new key, not yet in the store: the first
	// journal write creates it. created says it was; lost, that another
	// writer created the key first (nothing was sent); createErr, that
	// the store refused the create (nothing was sent).
	pending *state.Record
	// held is the record as this submit last wrote it while it owns it
	// (created, taken over, journaled): its next writes are blind
	// replacements of it (state.Store.Replace), not read-modify-writes.
	held      *state.Record
	created   bool
	lost      bool
	createErr error
	// unread: the pending record's key was not read before its forward
	// (see forwardNew).
	unread bool
	// remembered holds the record lookup found in the engine's memory
	// (finals), in the op so that a retry answered from there allocates
	// no record of its own.
	remembered state.Record
	// observed: whether the key had a record was noted (observeKey).
	// noSlot: the last attempt, made without a read, found no upstream
	// slot free at once and did nothing (the key is decided again).
	observed, noSlot bool
	// found is the record a create that lost to another writer found
	// under the key (decide answers by it without reading it again).
	found *state.Record
	sess  string       // the ESME session, for log lines
	log   *slog.Logger // built by logger on first use: most submits log nothing
	shown string       // o.k.Key as logs and the router show it (logKey), computed once
}

// newOp derives the submit's key, segment and fingerprint under policy p,
// or the status refusing it.
func (e *Engine) newOp(ctx context.Context, account string, p Policy, sub *smpp.Submit) (*op, smpp.Status) {
	seg := sub.Segment()
	o := &op{e: e, account: account, p: p.withDefaults(),
		c: &content{sub: sub, seg: seg, fp: e.fingerprint(sub, seg)}}
	key, st := o.deriveKey()
	if st != smpp.StatusOK {
		return nil, st
	}
	o.retention = max(o.p.Retention, o.window)
	o.k = state.Key{Account: account, Key: key, Segment: seg.String()}
	if o.window > 0 && e.now().Before(e.started.Add(o.window)) {
		o.k = e.legacyKey(ctx, o.k, o.c, o.window)
	}
	return o, smpp.StatusOK
}

// deriveKey returns the record key, setting tracked and window (0: the
// whole retention), or a refusal status.
func (o *op) deriveKey() (string, smpp.Status) {
	p, sub := o.p, o.c.sub
	mode := p.Key
	var umr string // with config.KeyReference: the user_message_reference
	if mode == config.KeyTLV || mode == config.KeyReference {
		tag := p.TLVTag
		if mode == config.KeyReference {
			tag = smpp.TagUserMessageReference
		}
		v, ok := sub.TLV(tag)
		switch {
		case ok && mode == config.KeyTLV:
			v = bytes.TrimRight(v, "\x00")
			if len(v) == 0 || len(v) > 255 {
				return "", smpp.StatusInvTLVVal
			}
			o.tracked = true
			return KeyOfTLV(v), smpp.StatusOK
		case ok && len(v) != 2: // an Integer(2), SMPP 3.4 §5.3.2.17
			return "", smpp.StatusInvTLVVal
		case ok:
			umr = "/umr" + strconv.Itoa(int(binary.BigEndian.Uint16(v)))
		case p.MissingKey == config.MissingReject:
			return "", smpp.StatusMissingTLV
		case p.MissingKey == config.MissingFingerprint:
			mode = config.KeyFingerprint
		default:
			mode = config.KeyNone
		}
	}
	if mode == config.KeyFingerprint || mode == config.KeyReference {
		key := prefixFingerprintKey + hex.EncodeToString(o.c.fp[:]) + umr
		if g := o.c.seg; g.Total > 0 {
			// Without a client key, the reference number is what tells the
			// parts of two long messages with a common tail apart.
			key += "/ref" + strconv.Itoa(int(g.Ref))
		}
		o.tracked, o.window = true, p.FingerprintWindow
		return key, smpp.StatusOK
	}
	// Untracked: still recorded (for receipt routing) under a unique key.
	return "u:" + o.e.cfg.InstanceID + "." + o.e.run + "-" + strconv.FormatUint(o.e.seq.Add(1), 36), smpp.StatusOK
}

// logger is the engine's logger with the submit's identity attached.
func (o *op) logger() *slog.Logger {
	if o.log == nil {
		o.log = o.e.log.With("account", o.account, "session", o.sess, "key", o.shown, "segment", o.k.Segment, "sequence", o.c.sub.Header.Sequence)
	}
	return o.log
}

// debug logs a DEBUG line with the submit's identity, building that
// logger only when the line is written: a retry answered from memory
// must not pay for it.
func (o *op) debug(msg string, args ...any) {
	if o.e.log.Enabled(context.Background(), slog.LevelDebug) {
		o.logger().Debug(msg, args...)
	}
}

// storeErr is the answer to a submit the store refused.
func (o *op) storeErr() Answer {
	return Answer{Status: smpp.StatusSysErr, Outcome: OutStoreErr, Key: o.k}
}

// decide applies the decision table: it answers by the record already
// under the key, or forwards a new one. A new record is created only when
// an upstream session has reserved the submit's sequence number (the
// create is also the journal, see attempt), so a fresh submit costs two
// durable writes, and a duplicate of a settled key costs a read.
func (o *op) decide(ctx context.Context) Answer {
	e := o.e
	o.shown = e.logKey(o.k.Key)
	o.sess = sessionOf(ctx)
	now := e.now()
	o.owner = e.owner()
	for i := range 4 {
		if i > 0 {
			e.finals.forget(o.k) // moved meanwhile: read the store
		}
		// An untracked key is unique: it never has a record to read.
		unread := i == 0 && e.cfg.CreateFirst && (!o.tracked || !e.haveRecord.readFirst())
		var existing *state.Record
		var err error
		if f := o.found; f != nil && !f.Expired(e.now()) {
			// The create that lost found it: no need to read it again.
			existing, o.found = f, nil
			e.foundInStore(existing)
		} else {
			o.found = nil
			// A read counts for haveRecord when it is the first look at the
			// key: the first pass, or the pass after one that found no
			// upstream slot free at once (it learned nothing of the key).
			existing, err = o.lookup(ctx, unread, i == 0 || o.noSlot)
		}
		switch {
		case errors.Is(err, state.ErrNotFound):
			a, raced := o.forwardNew(ctx, o.newRecord(ctx, now), unread)
			if raced {
				continue // created meanwhile by another instance: decide by it
			}
			return a
		case err != nil:
			o.logger().Error("store refused the lookup; nothing forwarded", "err", err)
			return o.storeErr()
		}
		if o.pastWindow(existing) {
			rec := o.newRecord(ctx, now)
			rec.History = []state.Event{{At: now, State: state.Sent, Note: "created"}}
			e.finals.forget(o.k) // replaced, or about to be
			// The archive is the whole record, history and all (a record
			// the engine remembers holds only what an answer needs).
			full, err := e.cfg.Store.Get(ctx, o.k)
			switch {
			case errors.Is(err, state.ErrNotFound):
				continue // gone meanwhile: decide again
			case err != nil:
				o.logger().Error("store refused the lookup; nothing forwarded", "err", err)
				return o.storeErr()
			case !o.pastWindow(full):
				// What the engine remembered is not what the store holds:
				// another instance renewed the key meanwhile. Decide by
				// the store's record (a retry of that renewal is replayed).
				continue
			}
			existing = full
			renewed, err := o.renew(ctx, existing, rec)
			if err != nil {
				if !errors.Is(err, state.ErrLeaseLost) {
					// The renewal may have been applied all the same.
					o.releaseUnsent(ctx, "not sent: store error on renewal")
				}
				return o.storeErr()
			}
			if renewed {
				// rec now stands under the key, owned by this submit.
				return o.forward(ctx, now)
			}
			continue // renewed by another submit meanwhile: decide again
		}
		if a, again := o.answerExisting(ctx, existing); !again {
			return a
		}
	}
	return Answer{Status: smpp.StatusThrottled, Outcome: OutThrottled, Key: o.k}
}

// pastWindow reports whether r, settled, is past the dedup window of
// this submit's key (a fingerprint key's): the submit then starts a new
// operation of the key.
func (o *op) pastWindow(r *state.Record) bool {
	return o.window > 0 && r.State != state.Sent && !o.e.now().Before(r.Created.Add(o.window))
}

// newRecord is the record of this submit as a new operation of its key,
// owned by it, made only when the key has none (a duplicate needs no
// proxy id or address hash).
func (o *op) newRecord(ctx context.Context, now time.Time) *state.Record {
	sub := o.c.sub
	return &state.Record{
		Key: o.k, Fingerprint: o.c.fp, FingerprintVersion: state.FingerprintHMAC, State: state.Sent, Owner: o.owner,
		Created: now, Updated: now, Expires: now.Add(max(o.retention, flightGuard)), Attempts: 1,
		ProxyID:  o.e.issueID(ctx, o.account),
		AddrHash: state.HashAddrs(sub.SrcAddr, sub.DstAddr),
	}
}

// lookup returns the live record under the key: a settled one this
// engine remembers, else the store's (remembered when settled). With
// unread, a key the engine does not remember is taken as new without
// reading the store (Config.CreateFirst): the create finds a record that
// exists, and the decision is then taken again by that record.
func (o *op) lookup(ctx context.Context, unread, first bool) (*state.Record, error) {
	e := o.e
	if r := &o.remembered; e.finals.get(o.k, r) && !r.Expired(e.now()) {
		e.cfg.Metrics.settledFound(true)
		return r, nil
	}
	if unread {
		return nil, state.ErrNotFound
	}
	var r *state.Record
	var err error
	if h, ok := e.cfg.Store.(state.HotReader); ok {
		r, err = h.GetHot(ctx, o.k) // decisions never read the history
	} else {
		r, err = e.cfg.Store.Get(ctx, o.k)
	}
	if err == nil {
		e.foundInStore(r)
	}
	if first && (err == nil || errors.Is(err, state.ErrNotFound)) {
		o.observeKey(err == nil)
	}
	return r, err
}

// foundInStore remembers r, found in the store (read, or by a create),
// if it is settled, and counts it (smppproxy_dedup_settled_lookups_total).
func (e *Engine) foundInStore(r *state.Record) {
	e.finals.learn(r)
	if settled(r) {
		e.cfg.Metrics.settledFound(false)
	}
}

// observeKey notes, once per submit, whether its key, not remembered,
// had a record (Config.CreateFirst; see haveRecord).
func (o *op) observeKey(had bool) {
	if o.e.cfg.CreateFirst && o.tracked && !o.observed {
		o.observed = true
		o.e.haveRecord.observe(had)
	}
}

// forwardNew forwards a submit whose key has no record: rec is created by
// the first journal write (see attempt). raced=true: another writer
// created the key first, nothing was sent; decide again. unread: the key
// was not read first (Config.CreateFirst); the attempt then takes only
// upstream capacity that is free at once, and if there is none, nothing
// is done and the submit is decided again (raced) by a read.
func (o *op) forwardNew(ctx context.Context, rec *state.Record, unread bool) (a Answer, raced bool) {
	// A new attempt: what an earlier one (lost to another writer) found
	// does not carry over.
	o.pending, o.created, o.lost, o.createErr, o.held, o.noSlot = rec, false, false, nil, nil, false
	o.unread = unread
	a = o.forward(ctx, rec.Created)
	switch {
	case o.lost:
		o.pending, o.unread = nil, false // not this submit's to create: what it decides next journals by update
		return Answer{}, true
	case errors.Is(o.createErr, state.ErrLeaseLost):
		// Nothing was written: nothing to release, and no store failure
		// (the lease's loss is logged and alerted on once, by the store).
		return o.storeErr(), false
	case o.createErr != nil:
		o.logger().Error("store refused the record; nothing forwarded", "err", o.createErr)
		o.releaseUnsent(ctx, "not sent: store error on create")
		return o.storeErr(), false
	}
	if !o.tracked && a.Outcome == OutForwarded {
		a.Outcome = OutUntracked
	}
	return a, false
}

// answerExisting answers by the record already under the key (within its
// dedup window). again=true: it was moved meanwhile; decide anew.
func (o *op) answerExisting(ctx context.Context, existing *state.Record) (Answer, bool) {
	p, k := o.p, o.k
	if !o.c.matches(existing) {
		o.logger().Warn("key reused for other content; conflict", "status", p.ConflictStatus.String(), "state", string(existing.State))
		return Answer{Status: p.ConflictStatus, Outcome: OutConflict, Key: k}, false
	}
	switch existing.State {
	case state.Accepted:
		o.debug("duplicate replayed", "message_id", existing.MessageID, "proxy_id", existing.ProxyID, "upstream", existing.Upstream)
		return Answer{Status: smpp.StatusOK, MessageID: existing.ClientMessageID(), Outcome: OutReplayed, Key: k}, false
	case state.Rejected:
		o.debug("duplicate replayed rejection", "status", smpp.Status(existing.Status).String())
		return Answer{Status: smpp.Status(existing.Status), Outcome: OutReplayed, Key: k}, false
	case state.Unknown:
		why := o.resendUnknown(existing)
		if why == "" {
			o.debug("duplicate of an unknown outcome; not forwarded", "status", p.UnknownStatus.String(), "policy", string(p.OnUnknown))
			return Answer{Status: p.UnknownStatus, Outcome: OutUnknown, Key: k}, false
		}
		return o.takeover(ctx, state.Unknown, why)
	case state.Sent:
		return o.waitOther(ctx, existing.Owner), false
	case state.Retryable:
		return o.takeover(ctx, state.Retryable, noteRetake)
	default:
		return o.storeErr(), false
	}
}

// renew ends the dedup window of old (a fingerprint record past
// fingerprint_window): the record is first copied under an archive key —
// so its receipts still find it by message id — and then replaced by rec
// under the same key, atomically against a concurrent renewal. It reports
// whether this call replaced it (false: someone else did, decide again),
// or the store's error (the replacement may have been applied all the
// same: the caller releases the record; not after state.ErrLeaseLost,
// when nothing was written).
func (o *op) renew(ctx context.Context, old, rec *state.Record) (bool, error) {
	e, log := o.e, o.logger()
	arch := old.Clone()
	arch.Key.Key = old.Key.Key + "@" + strconv.FormatInt(old.Created.UnixNano(), 36)
	arch.Owner = "archived"
	if _, _, err := e.cfg.Store.Create(ctx, arch); err != nil {
		if !errors.Is(err, state.ErrLeaseLost) {
			log.Error("store refused to archive a record past its dedup window; nothing forwarded", "err", err)
		}
		return false, err
	}
	_, err := e.cfg.Store.Update(ctx, old.Key, func(r *state.Record) error {
		if !r.Created.Equal(old.Created) || r.State == state.Sent {
			return state.ErrAbort // renewed by someone else, or in flight
		}
		fresh := rec.Clone()
		fresh.History = []state.Event{{At: rec.Created, State: state.Sent, Note: "created (the previous record of this key passed its dedup window; archived)"}}
		*r = *fresh
		return nil
	})
	switch {
	case errors.Is(err, state.ErrAbort), errors.Is(err, state.ErrNotFound):
		return false, nil
	case errors.Is(err, state.ErrLeaseLost):
		return false, err
	case err != nil:
		log.Error("store refused to renew a record past its dedup window; nothing forwarded", "err", err)
		return false, err
	}
	log.Info("dedup window passed; the key starts a new operation", "archived_as", e.logKey(arch.Key.Key))
	return true, nil
}

// Notes recorded in the history when a record is taken over.
const (
	noteRetake          = "retry takes over a retryable record"
	noteResendAfter     = state.LegacyResendNote
	noteResend          = "on_unknown resend: retry forwards again (upstream deduplicates)"
	noteValidityExpired = "validity period over; not sent"
)

// resendUnknown returns the reason a retry of an unknown record may forward
// again under the account's on_unknown policy, or "" to hold.
func (o *op) resendUnknown(r *state.Record) string {
	switch o.p.OnUnknown {
	case config.UnknownResend:
		return noteResend
	case config.UnknownResendAfter:
		if o.e.now().Sub(r.Updated) < o.p.UnknownTimeout || r.Resends > 0 {
			return "" // too early, or resent once already: at-least-once, not at-least-many
		}
		return noteResendAfter
	}
	return ""
}

// takeover makes this submit the owner of a record in state from and
// forwards it. again=true: someone else moved the record; decide anew.
func (o *op) takeover(ctx context.Context, from state.SubmitState, note string) (Answer, bool) {
	expired := false
	var created time.Time
	held, err := o.e.cfg.Store.Update(ctx, o.k, func(r *state.Record) error {
		if r.State != from || !o.c.matches(r) {
			return state.ErrAbort
		}
		// Decided again atomically: another retry may have resent it meanwhile.
		if from == state.Unknown && o.resendUnknown(r) == "" {
			return state.ErrAbort
		}
		created = r.Created
		expired = o.retake(r, from, note)
		return nil
	})
	switch {
	case err == nil && expired:
		o.debug("retry after the validity period; not forwarded", "status", smpp.StatusInvExpiry.String())
		return Answer{Status: smpp.StatusInvExpiry, Outcome: OutRejected, Key: o.k}, false
	case err == nil:
		o.held = held
		o.debug("record taken over; forwarding again", "from", string(from), "reason", note)
		return o.forward(ctx, created), false
	case errors.Is(err, state.ErrAbort), errors.Is(err, state.ErrNotFound):
		return Answer{}, true
	case errors.Is(err, state.ErrLeaseLost):
		// Nothing was written (the lease lapsed after the submit was
		// admitted): no store failure, nothing to release.
		return o.storeErr(), false
	default:
		o.logger().Error("store refused the takeover; nothing forwarded", "err", err)
		o.releaseUnsent(ctx, "not sent: store error on takeover")
		return o.storeErr(), false
	}
}

// retake moves r, in state from, to `sent` owned by this submit, or to
// rejected when the submit's validity period is over (expired=true).
func (o *op) retake(r *state.Record, from state.SubmitState, note string) (expired bool) {
	r.Updated = o.e.now()
	if dl, ok := validityDeadline(o.c.sub, r.Created); ok && !r.Updated.Before(dl) {
		// An OTP that can no longer be used must not be sent late.
		r.State, r.Status = state.Rejected, uint32(smpp.StatusInvExpiry)
		addEvent(r, state.Event{At: r.Updated, State: state.Rejected, Status: r.Status, Note: noteValidityExpired})
		return true
	}
	r.State, r.Owner = state.Sent, o.owner
	// The new owner starts without a journal (the previous attempt's
	// stays in the history): until it journals, nothing of its own has
	// been written, and a store error can release it (releaseUnsent).
	r.Session, r.Sequence = "", 0
	// A record being forwarded must not expire under its owner.
	r.Expires = maxTime(r.Expires, r.Updated.Add(flightGuard))
	r.Attempts++
	if from == state.Unknown {
		r.Resends++
	}
	addEvent(r, state.Event{At: r.Updated, State: state.Sent, Note: note})
	return false
}

// releaseUnsent is the compensation for a store error on create, takeover
// or renewal: a failed commit is ambiguous (the write may be visible all
// the same), and a record left `sent` without an owner would throttle
// every retry until a restart (and be held `unknown` after it). If the
// record is ours, sent and not journaled by us (so nothing was written
// upstream), it becomes retryable. A new record carries its journal from
// the create, but a create the store refused was never followed by the
// write. When the store refuses the release too (a database that is still
// away), it is retried in the background like an outcome (persistLater).
func (o *op) releaseUnsent(ctx context.Context, note string) {
	createErr := o.createErr
	release := func(r *state.Record) error {
		if r.Owner != o.owner || r.State != state.Sent || (r.Session != "" && createErr == nil) {
			return errNotOwned
		}
		now := o.e.now()
		r.State, r.Status, r.Updated = state.Retryable, uint32(smpp.StatusSysErr), now
		r.Expires = expiresAfterAnswer(r, o.retention, now)
		addEvent(r, state.Event{At: now, State: state.Retryable, Status: r.Status, Note: note})
		return nil
	}
	_, err := o.e.cfg.Store.Update(context.WithoutCancel(ctx), o.k, release)
	switch {
	case err == nil:
		o.logger().Warn("record left by a failed store write released as retryable")
	case nothingToWrite(err):
	case errors.Is(err, state.ErrCorrupt):
		// Not a record this submit left behind: nothing to release.
		o.logger().Error(msgUnreadable, "err", err)
	default:
		log := o.logger()
		if !o.e.goBackground(func() { o.e.persistLater(log, o.k, release) }) {
			log.Warn(msgNotWrittenAtClose)
		}
	}
}

// waitOther waits (bounded by inflight_wait) for an owner in another
// process, or one that was already deciding when this submit arrived with
// different timing, by polling the store. An owner in another instance
// that is presumed dead (owners.go) is not waited for.
func (o *op) waitOther(ctx context.Context, owner string) Answer {
	p, k := o.p, o.k
	if o.e.owners.dead(ctx, owner) {
		return o.ownerDead()
	}
	bound := time.NewTimer(p.InflightWait)
	defer bound.Stop()
	delay := 5 * time.Millisecond
	poll := time.NewTimer(delay)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-bound.C:
		case <-poll.C:
			delay = min(delay*2, 100*time.Millisecond)
			poll.Reset(delay)
			r, err := o.e.cfg.Store.Get(ctx, k)
			if err != nil {
				break
			}
			if a, ok := o.settledByOther(r); ok {
				return a
			}
			owner = r.Owner
			continue
		}
		break
	}
	if ctx.Err() == nil && o.e.owners.dead(ctx, owner) {
		return o.ownerDead() // it died while this submit waited
	}
	o.debug("duplicate still in flight; throttled")
	return Answer{Status: smpp.StatusThrottled, Outcome: OutThrottled, Key: k}
}

// ownerDead is the answer to a duplicate of a record still sent by an
// instance presumed dead: ESME_RSYSERR, a system condition (not
// throttling) until the owner's lease runs out and the record becomes
// unknown. Nothing is forwarded: the owner may have written it upstream.
func (o *op) ownerDead() Answer {
	o.debug("duplicate of a record sent by an instance presumed dead; not forwarded", "status", smpp.StatusSysErr.String())
	return Answer{Status: smpp.StatusSysErr, Outcome: OutOwnerDead, Key: o.k}
}

// settledByOther is the answer to a duplicate once the record's owner has
// settled it, or false while it is still `sent`.
func (o *op) settledByOther(r *state.Record) (Answer, bool) {
	switch r.State {
	case state.Accepted:
		o.debug("duplicate joined in-flight submit", "message_id", r.MessageID, "proxy_id", r.ProxyID)
		return Answer{Status: smpp.StatusOK, MessageID: r.ClientMessageID(), Outcome: OutJoined, Key: o.k}, true
	case state.Rejected, state.Retryable:
		return Answer{Status: smpp.Status(r.Status), Outcome: OutJoined, Key: o.k}, true
	case state.Unknown:
		return Answer{Status: o.p.UnknownStatus, Outcome: OutUnknown, Key: o.k}, true
	}
	return Answer{}, false
}
