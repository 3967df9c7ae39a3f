package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// IDs maps message ids for receipts (SPEC §4); msgid.IDs implements it.
type IDs interface {
	// NormalizeID returns id, as upstream wrote it in a submit_sm_resp,
	// in the form receipts are matched in (stored as Record.NormID).
	NormalizeID(upstream, id string) string
	// IssueID returns a new proxy message id for a record of account, or
	// "" when the account is given the upstream's ids (passthrough).
	IssueID(account string) string
}

func (e *Engine) normID(upstream, id string) string {
	if e.cfg.IDs == nil || id == "" {
		return ""
	}
	if n := e.cfg.IDs.NormalizeID(upstream, id); n != id {
		return n
	}
	return ""
}

func (e *Engine) issueID(ctx context.Context, account string) string {
	if e.cfg.IDs == nil {
		return ""
	}
	// Random ids can collide (short styles sooner): an id already held by
	// a live record of the account is drawn again.
	var id string
	for range 16 {
		id = e.cfg.IDs.IssueID(account)
		if id == "" {
			return id
		}
		if _, err := e.cfg.Store.ByProxyID(ctx, account, id); errors.Is(err, state.ErrNotFound) {
			return id
		}
	}
	return id
}

// ResolveAccepted settles an unknown record by an operator who found it
// at the SMSC: it becomes accepted with messageID, and retries are
// answered with that id. Only unknown records can be resolved
// (ErrNotUnknown otherwise). A message id that another live record of the
// record's upstream holds is refused with ErrMessageIDHeld: the receipt
// index would be re-pointed and that record's receipts would go to this
// record's ESME.
func (e *Engine) ResolveAccepted(ctx context.Context, k state.Key, messageID, who string) (*state.Record, error) {
	if messageID == "" {
		return nil, errors.New("dedup: resolve as accepted needs a message id")
	}
	if err := e.checkIDFree(ctx, k, messageID); err != nil {
		return nil, err
	}
	return e.resolve(ctx, k, who, func(r *state.Record, ev *state.Event) {
		r.State, r.MessageID, r.Status = state.Accepted, messageID, 0
		r.NormID = e.normID(r.Upstream, messageID)
		ev.MessageID = messageID
	})
}

// ResolveNotSent settles an unknown record by an operator who found that
// the SMSC never got it: it becomes retryable, and the next retry forwards
// it. Only unknown records can be resolved (ErrNotUnknown otherwise).
func (e *Engine) ResolveNotSent(ctx context.Context, k state.Key, who string) (*state.Record, error) {
	return e.resolve(ctx, k, who, func(r *state.Record, ev *state.Event) {
		r.State, r.Status = state.Retryable, uint32(smpp.StatusSysErr)
		ev.Note += ": not sent"
	})
}

// resolve applies an operator's settlement to an unknown record, with its
// history event, and logs and counts it.
func (e *Engine) resolve(ctx context.Context, k state.Key, who string, settle func(*state.Record, *state.Event)) (*state.Record, error) {
	r, err := e.cfg.Store.Update(ctx, k, func(r *state.Record) error {
		if r.State != state.Unknown {
			return fmt.Errorf("%w (state %s)", ErrNotUnknown, r.State)
		}
		if err := e.checkOwnerGone(r); err != nil {
			return err
		}
		r.Updated = e.now()
		ev := state.Event{At: r.Updated, Note: "resolved by " + who}
		settle(r, &ev)
		ev.State = r.State
		addEvent(r, ev)
		return nil
	})
	if err == nil {
		e.log.Info("unknown record resolved", "account", k.Account, "key", e.logKey(k.Key), "segment", k.Segment, "state", string(r.State), "message_id", r.MessageID, "by", who)
		e.cfg.Metrics.resolve(k.Account, string(r.State))
	}
	return r, err
}

// checkIDFree returns ErrMessageIDHeld, naming the holder, when another
// live record of k's upstream is indexed under messageID (as normalised
// for that upstream). The record's own id is free.
func (e *Engine) checkIDFree(ctx context.Context, k state.Key, messageID string) error {
	cur, err := e.cfg.Store.Get(ctx, k)
	if err != nil {
		return err
	}
	match := e.normID(cur.Upstream, messageID)
	if match == "" {
		match = messageID
	}
	other, err := e.cfg.Store.ByMessageID(ctx, cur.Upstream, match)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return nil
	case err != nil:
		return err
	case other.Key == k:
		return nil
	}
	where := ""
	if other.Key.Segment != "" {
		where = fmt.Sprintf(" segment %q", other.Key.Segment)
	}
	return fmt.Errorf("%w: message id %q of upstream %q belongs to account %q key %q%s (state %s); resolving with it would send that record's receipts to this one",
		ErrMessageIDHeld, messageID, cur.Upstream, other.Key.Account, e.DisplayKey(other.Key.Key), where, other.State)
}

// ResolveFromReceipt settles an unknown record of upstream that a receipt
// named (SPEC §5): it becomes accepted with messageID (as the upstream
// would have written it in its submit_sm_resp), so retries are answered
// with it. why is recorded in the history ("resolved by receipt: " + why).
// ErrNotUnknown when the record is not unknown or was last written to
// another upstream.
func (e *Engine) ResolveFromReceipt(ctx context.Context, k state.Key, upstream, messageID, why string) (*state.Record, error) {
	if messageID == "" {
		return nil, errors.New("dedup: resolve from a receipt needs a message id")
	}
	r, err := e.cfg.Store.Update(ctx, k, func(r *state.Record) error {
		if r.State != state.Unknown || r.Upstream != upstream {
			return fmt.Errorf("%w (state %s, upstream %q)", ErrNotUnknown, r.State, r.Upstream)
		}
		r.Updated = e.now()
		r.State, r.MessageID, r.Status = state.Accepted, messageID, 0
		r.NormID = e.normID(upstream, messageID)
		addEvent(r, state.Event{At: r.Updated, State: state.Accepted, MessageID: messageID, Note: "resolved by receipt: " + why})
		return nil
	})
	if err == nil {
		e.log.Info("unknown record resolved by a receipt", "account", k.Account, "key", e.logKey(k.Key), "segment", k.Segment, "upstream", upstream, "message_id", messageID, "why", why)
		e.cfg.Metrics.resolve(k.Account, string(r.State))
	}
	return r, err
}

// KeyOfTLV is the record key (state.Key.Key) of a submit whose
// idempotency key TLV carried v (trailing NULs trimmed) under the tlv
// policy; a receipt that echoes the key (echo_tlv) names its record by it.
func KeyOfTLV(v []byte) string { return "k:" + string(bytes.TrimRight(v, "\x00")) }

// ErrNotUnknown is returned by Resolve for a record that is not unknown.
var ErrNotUnknown = errors.New("dedup: record is not unknown")

// ErrOwnerMayWrite is returned by Resolve for a record made unknown
// because its owner's lease ran out, while that owner may still write the
// answer its SMSC gave (it was cut off from the store, not dead): a
// resolution would contradict it, and a "not sent" would send the message
// twice. It holds for Config.OwnerWriteHorizon after the lease ran out.
// (Not beyond, even while the owner's instance is live again: an owner is
// one run of one instance, and a run cut off that long has given up.)
var ErrOwnerMayWrite = errors.New("dedup: the record's owner instance may still write its outcome")

// checkOwnerGone returns ErrOwnerMayWrite when the unknown record r was
// made unknown by its owner's lease running out less than the owner write
// horizon ago.
func (e *Engine) checkOwnerGone(r *state.Record) error {
	if len(r.History) == 0 {
		return nil
	}
	last := r.History[len(r.History)-1]
	if last.Note != state.NoteLeaseExpired {
		return nil
	}
	horizon := e.ownerWriteHorizon()
	if since := e.now().Sub(last.At); since < horizon {
		return fmt.Errorf("%w (instance %s; its lease ran out %s ago, wait until %s have passed)", ErrOwnerMayWrite, state.OwnerInstance(r.Owner), since.Round(time.Second), horizon)
	}
	return nil
}

// ownerWriteHorizon is Config.OwnerWriteHorizon, or its default: the
// background retries of an outcome (persistFor) and a minute for the
// answer to come.
func (e *Engine) ownerWriteHorizon() time.Duration {
	if d := time.Duration(e.horizon.Load()); d > 0 {
		return d
	}
	return persistFor + time.Minute
}

// SetOwnerWriteHorizon replaces Config.OwnerWriteHorizon (a reload that
// changed the upstreams' timeouts). It never shortens it: the submits
// forwarded before still run under the timeouts they started with.
func (e *Engine) SetOwnerWriteHorizon(d time.Duration) {
	for {
		cur := e.horizon.Load()
		if int64(d) <= cur || e.horizon.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// OwnerWriteHorizon is how long after its lease ran out the owner of a
// submit may still write its outcome: the longest a forward may take
// (waiting for a bind, then each attempt's response timeout and back-off)
// plus the background retries of a refused outcome write.
func OwnerWriteHorizon(longestForward time.Duration) time.Duration {
	return longestForward + persistFor + time.Minute
}

// ErrMessageIDHeld is returned by Resolve for a message id that another
// live record of the same upstream already holds.
var ErrMessageIDHeld = errors.New("dedup: message id already held by another record")
