package dedup

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
	Now        func() time.Time
	// IDs normalises upstream message ids for receipt matching and issues
	// proxy message ids (message_id: proxy). nil: ids are stored as the
	// upstream wrote them and every account gets upstream ids.
	IDs IDs
	// Secret keys the fingerprints (HMAC-SHA256) and the tags operators
	// see instead of them: the install's secret (state.FileSecret). nil: a
	// random secret of this Engine only (unit tests).
	Secret *state.Secret
}

// Engine applies the submit decision table. Safe for concurrent use.
type Engine struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	seq   atomic.Uint64
	mu    sync.Mutex
	fl    map[state.Key]*flight
	count [numOutcomes]atomic.Uint64
}

// flight is a submit being decided in this process; identical submits of
// the same key join it instead of racing the store.
type flight struct {
	fp   [32]byte
	done chan struct{}
	ans  Answer
}

// New returns an Engine.
func New(cfg Config) *Engine {
	e := &Engine{cfg: cfg, log: cfg.Logger, now: cfg.Now, fl: make(map[state.Key]*flight)}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.cfg.InstanceID == "" {
		e.cfg.InstanceID = randomID()
	}
	if e.cfg.Secret == nil {
		var b [32]byte
		_, _ = rand.Read(b[:])
		e.cfg.Secret = state.NewSecret(b)
	}
	return e
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
	err := e.cfg.Store.Scan(ctx, func(r *state.Record) bool {
		if r.State == state.Sent {
			keys = append(keys, r.Key)
		}
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
	p = p.withDefaults()
	seg := sub.Segment()
	c := &content{sub: sub, seg: seg, fp: sub.FingerprintWith(seg, e.cfg.Secret.MAC())}
	fp := c.fp
	key, tracked, window, st := e.derive(p, sub, fp, seg)
	retention := max(p.Retention, window)
	if st != smpp.StatusOK {
		e.log.Info("submit refused", "account", account, "session", sessionOf(ctx), "sequence", sub.Header.Sequence, "reason", "key", "status", st.String())
		return e.counted(account, Answer{Status: st, Outcome: OutInvalid})
	}
	k := state.Key{Account: account, Key: key, Segment: seg.String()}
	if window > 0 {
		k = e.legacyKey(ctx, k, c, window)
	}

	// Join an identical submit of the same key already being decided here.
	e.mu.Lock()
	cur, busy := e.fl[k]
	if busy && cur.fp == fp {
		e.mu.Unlock()
		return e.join(ctx, account, p, k, cur)
	}
	// A flight of other content (a conflict in the making) is not joined:
	// this submit decides by the store, without registering a flight.
	f := &flight{fp: fp, done: make(chan struct{})}
	own := !busy
	if own {
		e.fl[k] = f
	}
	e.mu.Unlock()

	var a Answer
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
	a = e.decide(ctx, account, p, k, c, tracked, retention, window)
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
		e.log.Info("duplicate joined in-flight submit", "account", k.Account, "session", sessionOf(ctx), "key", e.logKey(k.Key), "segment", k.Segment, "status", a.Status.String(), "message_id", a.MessageID)
		return e.counted(account, a)
	case <-t.C:
	case <-ctx.Done():
	}
	e.log.Info("duplicate still in flight; throttled", "account", k.Account, "session", sessionOf(ctx), "key", e.logKey(k.Key), "segment", k.Segment)
	return e.counted(account, Answer{Status: smpp.StatusThrottled, Outcome: OutThrottled, Key: k})
}

// derive returns the record key, whether it deduplicates, its dedup
// window (0: the whole retention), or a refusal status.
func (e *Engine) derive(p Policy, sub *smpp.Submit, fp [32]byte, seg smpp.Segment) (string, bool, time.Duration, smpp.Status) {
	mode := p.Key
	if mode == KeyTLV {
		v, ok := sub.TLV(p.TLVTag)
		if ok {
			v = bytes.TrimRight(v, "\x00")
			if len(v) == 0 || len(v) > 255 {
				return "", false, 0, smpp.StatusInvTLVVal
			}
			return KeyOfTLV(v), true, 0, smpp.StatusOK
		}
		switch p.MissingKey {
		case MissingReject:
			return "", false, 0, smpp.StatusMissingTLV
		case MissingFingerprint:
			mode = KeyFingerprint
		default:
			mode = KeyNone
		}
	}
	if mode == KeyFingerprint {
		key := prefixFingerprintKey + hex.EncodeToString(fp[:])
		if g := seg; g.Total > 0 {
			// Without a client key, the reference number is what tells the
			// parts of two long messages with a common tail apart.
			key += "/ref" + strconv.Itoa(int(g.Ref))
		}
		return key, true, p.FingerprintWindow, smpp.StatusOK
	}
	// Untracked: still recorded (for receipt routing) under a unique key.
	return "u:" + e.cfg.InstanceID + "-" + strconv.FormatUint(e.seq.Add(1), 36), false, 0, smpp.StatusOK
}

func (e *Engine) owner() string {
	return e.cfg.InstanceID + "/" + strconv.FormatUint(e.seq.Add(1), 36)
}

// decide applies the decision table. retention is how long the record is
// kept (receipts are routed by it); window, when set (fingerprint keys), is
// how long it deduplicates: an older record of the key is archived and the
// submit is a new operation.
func (e *Engine) decide(ctx context.Context, account string, p Policy, k state.Key, c *content, tracked bool, retention, window time.Duration) Answer {
	sub, seg := c.sub, c.seg
	log := e.log.With("account", account, "session", sessionOf(ctx), "key", e.logKey(k.Key), "segment", k.Segment, "sequence", sub.Header.Sequence)
	now := e.now()
	me := e.owner()
	rec := &state.Record{
		Key: k, Fingerprint: c.fp, FingerprintVersion: state.FingerprintHMAC, State: state.Sent, Owner: me,
		Created: now, Updated: now, Expires: now.Add(max(retention, flightGuard)), Attempts: 1,
		ProxyID:  e.issueID(ctx, account),
		AddrHash: state.HashAddrs(sub.SrcAddr, sub.DstAddr),
		History:  []state.Event{{At: now, State: state.Sent, Note: "created"}},
	}
	for range 4 {
		existing, created, err := e.cfg.Store.Create(ctx, rec)
		if err != nil {
			log.Error("store refused the record; nothing forwarded", "err", err)
			e.releaseUnsent(ctx, log, k, me, retention, "not sent: store error on create")
			return Answer{Status: smpp.StatusSysErr, Outcome: OutStoreErr, Key: k}
		}
		if created {
			a := e.forward(ctx, log, account, p, k, me, sub, seg, now, retention)
			if !tracked && a.Outcome == OutForwarded {
				a.Outcome = OutUntracked
			}
			return a
		}
		if window > 0 && existing.State != state.Sent && !e.now().Before(existing.Created.Add(window)) {
			renewed, err := e.renew(ctx, log, existing, rec)
			if err != nil {
				// The renewal may have been applied all the same.
				e.releaseUnsent(ctx, log, k, me, retention, "not sent: store error on renewal")
				return Answer{Status: smpp.StatusSysErr, Outcome: OutStoreErr, Key: k}
			}
			if renewed {
				// rec now stands under the key, owned by this submit.
				return e.forward(ctx, log, account, p, k, me, sub, seg, now, retention)
			}
			continue // renewed by another submit meanwhile: decide again
		}
		if !c.matches(existing) {
			log.Warn("key reused for other content; conflict", "status", p.ConflictStatus.String(), "state", string(existing.State))
			return Answer{Status: p.ConflictStatus, Outcome: OutConflict, Key: k}
		}
		switch existing.State {
		case state.Accepted:
			log.Info("duplicate replayed", "message_id", existing.MessageID, "proxy_id", existing.ProxyID, "upstream", existing.Upstream)
			return Answer{Status: smpp.StatusOK, MessageID: existing.ClientMessageID(), Outcome: OutReplayed, Key: k}
		case state.Rejected:
			log.Info("duplicate replayed rejection", "status", smpp.Status(existing.Status).String())
			return Answer{Status: smpp.Status(existing.Status), Outcome: OutReplayed, Key: k}
		case state.Unknown:
			why := e.resendUnknown(p, existing)
			if why == "" {
				log.Info("duplicate of an unknown outcome; not forwarded", "status", p.UnknownStatus.String(), "policy", string(p.OnUnknown))
				return Answer{Status: p.UnknownStatus, Outcome: OutUnknown, Key: k}
			}
			a, again := e.takeover(ctx, log, account, p, k, c, me, retention, state.Unknown, why)
			if !again {
				return a
			}
		case state.Sent:
			return e.waitOther(ctx, log, p, k)
		case state.Retryable:
			a, again := e.takeover(ctx, log, account, p, k, c, me, retention, state.Retryable, noteRetake)
			if !again {
				return a
			}
		default:
			return Answer{Status: smpp.StatusSysErr, Outcome: OutStoreErr, Key: k}
		}
	}
	return Answer{Status: smpp.StatusThrottled, Outcome: OutThrottled, Key: k}
}

// renew ends the dedup window of old (a fingerprint record past
// fingerprint_window): the record is first copied under an archive key —
// so its receipts still find it by message id — and then replaced by rec
// under the same key, atomically against a concurrent renewal. It reports
// whether this call replaced it (false: someone else did, decide again),
// or the store's error (the replacement may have been applied all the
// same: the caller releases the record).
func (e *Engine) renew(ctx context.Context, log *slog.Logger, old, rec *state.Record) (bool, error) {
	arch := old.Clone()
	arch.Key.Key = old.Key.Key + "@" + strconv.FormatInt(old.Created.UnixNano(), 36)
	arch.Owner = "archived"
	if _, _, err := e.cfg.Store.Create(ctx, arch); err != nil {
		log.Error("store refused to archive a record past its dedup window; nothing forwarded", "err", err)
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
func (e *Engine) resendUnknown(p Policy, r *state.Record) string {
	switch p.OnUnknown {
	case OnUnknownResend:
		return noteResend
	case OnUnknownResendAfter:
		if e.now().Sub(r.Updated) < p.UnknownTimeout || r.Resends > 0 {
			return "" // too early, or resent once already: at-least-once, not at-least-many
		}
		return noteResendAfter
	}
	return ""
}

// takeover makes this submit the owner of a record in state from and
// forwards it. again=true: someone else moved the record; decide anew.
func (e *Engine) takeover(ctx context.Context, log *slog.Logger, account string, p Policy, k state.Key, c *content, me string, retention time.Duration, from state.SubmitState, note string) (Answer, bool) {
	sub, seg := c.sub, c.seg
	expired := false
	var created time.Time
	_, err := e.cfg.Store.Update(ctx, k, func(r *state.Record) error {
		if r.State != from || !c.matches(r) {
			return state.ErrAbort
		}
		// Decided again atomically: another retry may have resent it meanwhile.
		if from == state.Unknown && e.resendUnknown(p, r) == "" {
			return state.ErrAbort
		}
		created = r.Created
		r.Updated = e.now()
		if dl, ok := validityDeadline(sub, r.Created); ok && !r.Updated.Before(dl) {
			// An OTP that can no longer be used must not be sent late.
			expired = true
			r.State, r.Status = state.Rejected, uint32(smpp.StatusInvExpiry)
			addEvent(r, state.Event{At: r.Updated, State: state.Rejected, Status: r.Status, Note: noteValidityExpired})
			return nil
		}
		r.State, r.Owner = state.Sent, me
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
		return nil
	})
	switch {
	case err == nil && expired:
		log.Info("retry after the validity period; not forwarded", "status", smpp.StatusInvExpiry.String())
		return Answer{Status: smpp.StatusInvExpiry, Outcome: OutRejected, Key: k}, false
	case err == nil:
		log.Info("record taken over; forwarding again", "from", string(from), "reason", note)
		return e.forward(ctx, log, account, p, k, me, sub, seg, created, retention), false
	case errors.Is(err, state.ErrAbort), errors.Is(err, state.ErrNotFound):
		return Answer{}, true
	default:
		log.Error("store refused the takeover; nothing forwarded", "err", err)
		e.releaseUnsent(ctx, log, k, me, retention, "not sent: store error on takeover")
		return Answer{Status: smpp.StatusSysErr, Outcome: OutStoreErr, Key: k}, false
	}
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

// releaseUnsent is the compensation for a store error on create, takeover
// or renewal: a failed Badger commit is ambiguous (the write may be visible
// all the same), and a record left `sent` without an owner would throttle
// every retry until a restart (and be held `unknown` after it). Best
// effort: if the record is ours, sent and not journaled by us (so nothing
// was written upstream), it becomes retryable.
func (e *Engine) releaseUnsent(ctx context.Context, log *slog.Logger, k state.Key, me string, retention time.Duration, note string) {
	_, err := e.cfg.Store.Update(context.WithoutCancel(ctx), k, func(r *state.Record) error {
		if r.Owner != me || r.State != state.Sent || r.Session != "" {
			return state.ErrAbort
		}
		now := e.now()
		r.State, r.Status, r.Updated = state.Retryable, uint32(smpp.StatusSysErr), now
		r.Expires = expiresAfterAnswer(r, retention, now)
		addEvent(r, state.Event{At: now, State: state.Retryable, Status: r.Status, Note: note})
		return nil
	})
	if err == nil {
		log.Warn("record left by a failed store write released as retryable")
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

// waitOther waits (bounded by inflight_wait) for an owner in another
// process, or one that was already deciding when this submit arrived with
// different timing, by polling the store.
func (e *Engine) waitOther(ctx context.Context, log *slog.Logger, p Policy, k state.Key) Answer {
	deadline := time.Now().Add(p.InflightWait)
	delay := 5 * time.Millisecond
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			deadline = time.Time{}
			continue
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
		r, err := e.cfg.Store.Get(ctx, k)
		if err != nil {
			break
		}
		switch r.State {
		case state.Accepted:
			log.Info("duplicate joined in-flight submit", "message_id", r.MessageID, "proxy_id", r.ProxyID)
			return Answer{Status: smpp.StatusOK, MessageID: r.ClientMessageID(), Outcome: OutJoined, Key: k}
		case state.Rejected, state.Retryable:
			return Answer{Status: smpp.Status(r.Status), Outcome: OutJoined, Key: k}
		case state.Unknown:
			return Answer{Status: p.UnknownStatus, Outcome: OutUnknown, Key: k}
		}
	}
	log.Info("duplicate still in flight; throttled")
	return Answer{Status: smpp.StatusThrottled, Outcome: OutThrottled, Key: k}
}

// forward sends the owned record upstream and persists the outcome before
// answering.
func (e *Engine) forward(ctx context.Context, log *slog.Logger, account string, p Policy, k state.Key, me string, sub *smpp.Submit, seg smpp.Segment, created time.Time, retention time.Duration) Answer {
	var keyTag uint16
	if p.Key == KeyTLV {
		keyTag = p.TLVTag
	}
	att := &Attempt{
		Account: account, Key: e.logKey(k.Key), Submit: sub, Segment: seg, KeyTag: keyTag,
		Journal: func(upstream, session string, seq uint32) error {
			// Not the ESME's context: its owner disconnecting must not make
			// the attempt "not sent" for the duplicates that joined it.
			_, err := e.cfg.Store.Update(context.WithoutCancel(ctx), k, func(r *state.Record) error {
				if r.Owner != me || r.State != state.Sent {
					return fmt.Errorf("dedup: record no longer owned (state %s)", r.State)
				}
				r.Upstream, r.Session, r.Sequence, r.Updated = upstream, session, seq, e.now()
				addEvent(r, state.Event{At: r.Updated, State: state.Sent, Session: session, Sequence: seq, Note: "journaled before write to " + upstream})
				return nil
			})
			return err
		},
	}
	if dl, ok := validityDeadline(sub, created); ok {
		att.Deadline = dl
	}
	res := e.cfg.Forwarder.Forward(context.WithoutCancel(ctx), att)
	log = log.With("upstream", res.Upstream, "upstream_session", res.Session, "upstream_sequence", res.Sequence)

	var next state.SubmitState
	var a Answer
	stored := res.Status // the status kept on the record (replayed to joiners)
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
		next, a = state.Unknown, Answer{Status: p.UnknownStatus, Outcome: OutUnknown}
	}
	a.Key = k
	outcome := func(r *state.Record) error {
		if r.Owner != me || r.State != state.Sent {
			return errNotOwned
		}
		r.State, r.Status, r.Updated = next, uint32(stored), e.now()
		r.Expires = expiresAfterAnswer(r, retention, r.Updated)
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
	rec, err := e.cfg.Store.Update(context.WithoutCancel(ctx), k, outcome)
	if err != nil {
		// The outcome could not be made durable: never claim success. It is
		// written later, so retries are answered by what happened instead
		// of waiting for an owner that is gone.
		log.Error("store refused the outcome; answering ESME_RSYSERR and retrying the write", "err", err, "outcome", string(next))
		go e.persistLater(log, k, outcome)
		return Answer{Status: smpp.StatusSysErr, Outcome: OutStoreErr, Key: k}
	}
	if next == state.Accepted {
		a.MessageID = rec.ClientMessageID()
	}
	lvl := slog.LevelInfo
	if next == state.Unknown {
		lvl = slog.LevelWarn
	}
	log.Log(ctx, lvl, "submit decided", "outcome", a.Outcome.String(), "state", string(next), "status", res.Status.String(), "message_id", res.MessageID, "proxy_id", rec.ProxyID, "reason", errString(res.Err))
	return a
}

var errNotOwned = errors.New("dedup: record no longer owned")

// persistLater retries an outcome write that the store refused, with
// back-off, for up to persistFor; it stops when the write succeeds, the
// record is gone or no longer ours, or the store is closed. Until it
// succeeds the record stays `sent` (a restart makes it unknown).
func (e *Engine) persistLater(log *slog.Logger, k state.Key, fn func(*state.Record) error) {
	delay := 10 * time.Millisecond
	deadline := time.Now().Add(persistFor)
	for time.Now().Before(deadline) {
		time.Sleep(delay)
		delay = min(delay*2, 5*time.Second)
		_, err := e.cfg.Store.Update(context.Background(), k, fn)
		switch {
		case err == nil:
			log.Warn("outcome written after an earlier store error")
			return
		case errors.Is(err, errNotOwned), errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrClosed):
			return
		}
	}
	log.Error("outcome still not written; the record stays sent until a restart makes it unknown")
}

// persistFor bounds persistLater.
const persistFor = 2 * time.Minute

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
