// Package dedup is the idempotency engine: it derives the key of a
// submit_sm (client TLV, fingerprint, or none), its segment identity and
// fingerprint, creates the durable record before anything goes upstream,
// and applies the decision table of SPEC §3 — owner, replay, join,
// conflict, unknown, takeover of a retryable record — around a Forwarder.
package dedup

import (
	"context"
	"github.com/smppproxy/smppproxy/config"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
)

// The policies' enums are config's (config.KeyPolicy, config.MissingKeyPolicy,
// config.UnknownPolicy): one type per concept, named as the configuration
// names it.

// Policy is an account's idempotency policy. Zero fields take the SPEC
// defaults (see withDefaults).
type Policy struct {
	Key               config.KeyPolicy
	TLVTag            uint16
	MissingKey        config.MissingKeyPolicy
	Retention         time.Duration
	FingerprintWindow time.Duration
	InflightWait      time.Duration
	ConflictStatus    smpp.Status
	UnknownStatus     smpp.Status
	OnUnknown         config.UnknownPolicy
	UnknownTimeout    time.Duration
}

func (p Policy) withDefaults() Policy {
	if p.Key == "" {
		p.Key = config.KeyTLV
	}
	if p.TLVTag == 0 {
		p.TLVTag = smpp.DefaultIdempotencyTag
	}
	if p.MissingKey == "" {
		p.MissingKey = config.MissingForward
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
		p.OnUnknown = config.UnknownHold
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
	// It is called before Forward returns, on the goroutine that called
	// Forward (the engine's state of the submit is not locked).
	Journal func(upstream, session string, seq uint32) error
	// NoWait: take an upstream session and a throughput token only if one
	// is free at once (a key forwarded without being read first, see
	// Config.CreateFirst: if it has a record, it must not wait for or use
	// up upstream capacity before finding out); otherwise the result is
	// NotSent and the engine decides the submit again by a read.
	NoWait bool
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
