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
	if err := e.checkOwnerGone(ctx, k); err != nil {
		return nil, err
	}
	r, err := e.cfg.Store.Update(ctx, k, func(r *state.Record) error {
		if r.State != state.Unknown {
			return fmt.Errorf("%w (state %s)", ErrNotUnknown, r.State)
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
// twice. It holds while the owner instance is live again, and for
// ownerOutcomeHorizon after the lease ran out.
var ErrOwnerMayWrite = errors.New("dedup: the record's owner instance may still write its outcome")

// ownerOutcomeHorizon: how long after its lease ran out an owner cut off
// from the store may still write an outcome: its answer comes within its
// upstream's response_timeout (taken as at most a minute), and it retries
// a refused write for persistFor.
const ownerOutcomeHorizon = persistFor + time.Minute

// checkOwnerGone returns ErrOwnerMayWrite when k's record was made unknown
// by its owner's lease running out and that owner may still write.
func (e *Engine) checkOwnerGone(ctx context.Context, k state.Key) error {
	r, err := e.cfg.Store.Get(ctx, k)
	if err != nil || r.State != state.Unknown || len(r.History) == 0 {
		return nil // (Update decides the rest)
	}
	last := r.History[len(r.History)-1]
	if last.Note != state.NoteLeaseExpired {
		return nil
	}
	inst := state.OwnerInstance(r.Owner)
	if since := e.now().Sub(last.At); since < ownerOutcomeHorizon {
		return fmt.Errorf("%w (instance %s; its lease ran out %s ago, wait until %s have passed)", ErrOwnerMayWrite, inst, since.Round(time.Second), ownerOutcomeHorizon)
	}
	if e.cfg.Owners == nil || inst == "" {
		return nil
	}
	live, err := e.cfg.Owners.InstanceLive(ctx, inst)
	if err != nil {
		return err
	}
	if live {
		return fmt.Errorf("%w (instance %s is live again)", ErrOwnerMayWrite, inst)
	}
	return nil
}

// ErrMessageIDHeld is returned by Resolve for a message id that another
// live record of the same upstream already holds.
var ErrMessageIDHeld = errors.New("dedup: message id already held by another record")
