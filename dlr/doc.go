// Package dlr brings every deliver_sm from the upstreams to the right ESME,
// exactly once from the ESME's point of view and with nothing lost (SPEC §4
// and the receipt half of §5).
//
// A receipt (a deliver_sm or data_sm whose esm_class marks a receipt) is
// matched to its record by receipted_message_id, else by the id: field of
// the receipt text (ParseReceiptText), both normalised with the upstream's
// resp_id_format and receipt_id_format (package msgid, Config.IDs), through
// the store's message index. The ESME gets it with exactly the id it was
// given in its submit_sm_resp (the upstream's, or the proxy-issued one
// under message_id: proxy) in both places; every other byte is passed
// through. The record's delivery state is set apart from its submit state.
//
// Every receipt and MO is first appended to the account's durable queue
// (state.Queue, retention dlr_retention) and only then is the upstream's
// deliver_sm_resp sent, which is why Service.OnDeliver is synchronous. On a
// store that can (state.BadgerStore), a matched receipt's entry and its
// record's delivery state and event are one write (one transaction), and the
// record is read without its history. The
// same receipt received twice from an upstream (same upstream, id and
// state, for the same message: the record it matched, or the submit date
// of one that matched none) is queued once: the queue's dedup marker
// outlives the entry. A receipt of another message the upstream gave the
// same id (its counter restarted) is that message's, not a duplicate. MO is
// routed by mo_routes (longest destination prefix) or default_account and
// queued without a dedup key (two identical MO are two messages).
//
// Delivery: one dispatcher per account sends the queue in order to the
// account's bound RX/TRX sessions (Config.Receivers), round-robin, up to a
// window of deliver_sm outstanding per session (Account.Window, dlr_window,
// else Config.DeliverWindow) written in queue order, so an ESME with one
// receiving session gets its queue in order, and deletes an entry only
// once the ESME answered deliver_sm_resp status 0. It reads the queue on
// from the last entry it sent (a cursor), from before an entry that went
// back to pending, and from the head once a second. Each entry it has sent has one state (sending,
// deleting, deleted, refused, ack_pending). An entry not acknowledged
// within dlr_redelivery, refused by the ESME or caught by a disconnect is
// sent again (at once on the next bind, or after dlr_redelivery for a
// refusal): at-least-once. One the ESME acknowledged whose deletion the
// store refused is not sent again: the deletion is retried with back-off.
//
// receipted_message_id is read in receipt_id_format and, when that names
// nothing, in resp_id_format (SMSCs often write it as in their
// submit_sm_resp); a receipt whose TLV and text id name two different
// records is kept unmatched. A receipt whose state cannot be read is a
// duplicate only of the very same receipt.
//
// A receipt that matches no record is kept in a queue of its upstream
// ("unmatched/<upstream>", at most Config.UnmatchedMax entries: past it the
// oldest are deleted and counted), counted, listed by Service.Unmatched,
// and matched again with back-off: the record may be accepted a moment
// later (a receipt can overtake the submit_sm_resp), or the receipt may
// settle an unknown record (SPEC §5) when exactly one unknown record of
// that upstream has the receipt's addresses (swapped) and a creation time
// inside the receipt's submit-date window, or when the upstream echoes the
// idempotency key in echo_tlv and exactly one unknown record (over all
// accounts, a part of a long message included) has that key. Either only
// once the receipt has been kept longer than the upstream's
// response_timeout (Upstream.ResponseTimeout): before that its own record
// may still be `sent`, and only its id may match it. The record then
// becomes accepted with the receipt's id (through Config.Resolver, the
// dedup engine, whose history says why) and the receipt is delivered. dlr
// does not know the engine's key format: Config.Keys makes and recognises
// keys taken from a key TLV, and Config.NotUnknown reads the Resolver's "no
// longer unknown" error. Every time decision uses Config.Now; every
// goroutine stops with Service.Close.
//
// Message ids are read with package msgid (Config.IDs); query_sm and
// cancel_sm from an ESME are forwarded by package querycancel.
//
// Content: the queued PDU is the receipt or MO itself, so the store holds
// an MO's text until the ESME acknowledges it (Ack deletes it) or
// dlr_retention passes. Receipts carry the first characters of the original
// message in their text: field; they are stored the same way. Neither is
// ever logged: logs carry ids, states, accounts and upstreams.
package dlr
