// Package dedup is the idempotency engine: it derives the key of a
// submit_sm (client TLV, fingerprint, or none), its segment identity and
// fingerprint, creates the durable record before anything goes upstream,
// and applies the decision table of SPEC §3 — owner, replay, join,
// conflict, unknown, takeover of a retryable record — around a Forwarder.
package dedup

import (
	"context"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// KeyPolicy is where a submit's idempotency key comes from (SPEC §3.1);
// its values are config's idempotency.key names.
type KeyPolicy string

// Key policies (SPEC §3.1).
const (
	KeyTLV         KeyPolicy = "tlv"
	KeyFingerprint KeyPolicy = "fingerprint"
	// KeyReference keys a submit by its user_message_reference TLV
	// (0x0204, which many client libraries can set) together with its
	// fingerprint, within the fingerprint window: the reference is 16 bits
	// and wraps, so a reused reference with other content is a new message,
	// not a conflict, and the same content with another reference is a
	// message the client meant to send again.
	KeyReference KeyPolicy = "reference"
	KeyNone      KeyPolicy = "none"
)

// MissingKeyPolicy is what the tlv and reference policies do with a
// submit without their TLV; its values are config's idempotency.missing_key names.
type MissingKeyPolicy string

// Missing-key policies.
const (
	MissingForward     MissingKeyPolicy = "forward"
	MissingReject      MissingKeyPolicy = "reject"
	MissingFingerprint MissingKeyPolicy = "fingerprint"
)

// UnknownPolicy is what a retry of an unknown record gets; its values are
// config's idempotency.on_unknown names.
type UnknownPolicy string

// Unknown policies.
const (
	// OnUnknownHold answers unknown_status until the record is resolved.
	OnUnknownHold UnknownPolicy = "hold"
	// OnUnknownResendAfter lets one client retry forward again once the
	// record has been unknown for UnknownTimeout (at-least-once opt-in).
	OnUnknownResendAfter UnknownPolicy = "resend_after"
	// OnUnknownResend lets every client retry forward again at once: for an
	// upstream that deduplicates by the forwarded key TLV itself.
	OnUnknownResend UnknownPolicy = "resend"
)

// Policy is an account's idempotency policy. Zero fields take the SPEC
// defaults (see withDefaults).
type Policy struct {
	Key               KeyPolicy
	TLVTag            uint16
	MissingKey        MissingKeyPolicy
	Retention         time.Duration
	FingerprintWindow time.Duration
	InflightWait      time.Duration
	ConflictStatus    smpp.Status
	UnknownStatus     smpp.Status
	OnUnknown         UnknownPolicy
	UnknownTimeout    time.Duration
}

func (p Policy) withDefaults() Policy {
	if p.Key == "" {
		p.Key = KeyTLV
	}
	if p.TLVTag == 0 {
		p.TLVTag = smpp.DefaultIdempotencyTag
	}
	if p.MissingKey == "" {
		p.MissingKey = MissingForward
	}
	if p.Retention <= 0 {
		p.Retention = 72 * time.Hour
	}
	if p.FingerprintWindow <= 0 {
		p.FingerprintWindow = 60 * time.Second
	}
	if p.InflightWait <= 0 {
		p.InflightWait = 3 * time.Second
	}
	if p.ConflictStatus == 0 {
		p.ConflictStatus = smpp.StatusKeyConflict
	}
	if p.UnknownStatus == 0 {
		p.UnknownStatus = smpp.StatusSysErr
	}
	if p.OnUnknown == "" {
		p.OnUnknown = OnUnknownHold
	}
	return p
}

// ResultKind classifies what happened to a forward attempt.
type ResultKind int

const (
	// Answered: the upstream answered with Result.Status.
	Answered ResultKind = iota
	// NotSent: nothing was written upstream (no bind, all busy, journal
	// failure); Result.Status is what the ESME should get (0x08 or 0x58).
	NotSent
	// Ambiguous: the PDU may have reached the upstream but no answer came
	// (response timeout, session lost).
	Ambiguous
)

// Attempt is one forward of a submit owned by this engine.
type Attempt struct {
	Account string
	// Key is the record key (for logs).
	Key     string
	Submit  *smpp.Submit
	Segment smpp.Segment
	// KeyTag is the tag of the idempotency key TLV (0 when the policy does
	// not use one); the forwarder strips it unless the upstream is
	// configured to receive it.
	KeyTag uint16
	// Deadline, when set, is the end of the message's validity period: no
	// (re)try may start after it.
	Deadline time.Time
	// Journal must be called with the chosen upstream session and sequence
	// number before any byte is written; if it fails nothing may be written.
	Journal func(upstream, session string, seq uint32) error
}

// Result is the outcome of an Attempt.
type Result struct {
	Kind      ResultKind
	Status    smpp.Status
	MessageID string
	Upstream  string
	Session   string
	Sequence  uint32
	// Attempts is how many tries the forwarder made.
	Attempts int
	Err      error
}

// Forwarder sends an Attempt upstream (smppclient behind a router).
type Forwarder interface {
	Forward(ctx context.Context, a *Attempt) Result
}
