package dedup

import (
	"encoding/json"
	"slices"
	"testing"
)

// The outcome names are the submits metric's label values, the admin
// stats' keys and the log's outcome field (SPEC §9): they do not change.
func TestOutcomesAreNamedAsTheMetricLabels(t *testing.T) {
	want := []string{"forwarded", "replayed", "joined", "conflict", "unknown", "rejected", "throttled", "untracked", "retryable", "invalid", "store_error", "owner_dead"}
	var got []string
	for _, o := range Outcomes() {
		txt, err := o.MarshalText()
		if err != nil || string(txt) != o.String() {
			t.Errorf("%s.MarshalText() = %q, %v; want %q", o, txt, err, o.String())
		}
		got = append(got, o.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("Outcomes() = %q, want %q", got, want)
	}
	b, err := json.Marshal(map[Outcome]int{OutStoreErr: 1})
	if err != nil || string(b) != `{"store_error":1}` {
		t.Errorf("json.Marshal(map[Outcome]int) = %s, %v; want {\"store_error\":1}", b, err)
	}
	if s := Outcome(0).String(); s != "outcome(0)" {
		t.Errorf("Outcome(0).String() = %q, want outcome(0)", s)
	}
}
