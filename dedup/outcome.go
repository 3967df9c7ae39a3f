package dedup

import "strconv"

// Outcome is the decision taken for one submit_sm. Its name (String,
// MarshalText) is the outcome label of the submits metric, the admin
// stats and the logs.
type Outcome uint8

// Outcomes, in the order of SPEC §9. The zero Outcome is none of them.
const (
	OutForwarded Outcome = iota + 1
	OutReplayed
	OutJoined
	OutConflict
	OutUnknown
	OutRejected
	OutThrottled
	OutUntracked
	OutRetryable
	OutInvalid
	OutStoreErr
	OutOwnerDead

	numOutcomes = iota + 1 // size of tables indexed by Outcome
)

var outcomeNames = [numOutcomes]string{
	OutForwarded: "forwarded",
	OutReplayed:  "replayed",
	OutJoined:    "joined",
	OutConflict:  "conflict",
	OutUnknown:   "unknown",
	OutRejected:  "rejected",
	OutThrottled: "throttled",
	OutUntracked: "untracked",
	OutRetryable: "retryable",
	OutInvalid:   "invalid",
	OutStoreErr:  "store_error",
	OutOwnerDead: "owner_dead",
}

// Outcomes returns every outcome, in the order of SPEC §9.
func Outcomes() []Outcome {
	out := make([]Outcome, 0, numOutcomes-1)
	for o := OutForwarded; o < numOutcomes; o++ {
		out = append(out, o)
	}
	return out
}

// String returns the outcome's label ("forwarded", "store_error", …).
func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// MarshalText returns the outcome's label, so JSON and logs carry names.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }
