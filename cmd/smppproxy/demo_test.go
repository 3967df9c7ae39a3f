package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/smppproxy/smppproxy/dedup"
)

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	rep, err := runDemo(context.Background(), demoOptions{Out: &out, Keys: 8})
	if err != nil {
		t.Fatalf("runDemo: %v\n%s", err, out.String())
	}
	if err := rep.Err(); err != nil {
		t.Fatalf("demo verdict: %v\n%s", err, out.String())
	}
	if len(rep.Duplicates) != 0 || len(rep.IDMismatches) != 0 || len(rep.Unexpected) != 0 {
		t.Errorf("duplicates %v, id mismatches %v, unexpected %v", rep.Duplicates, rep.IDMismatches, rep.Unexpected)
	}
	// 8 keys, then the dropped, the slow and a new one after the restart.
	if rep.ReachedSMSC != 11 || rep.DistinctKeys != 11 {
		t.Errorf("reached the SMSC %d, distinct keys %d; want 11, 11", rep.ReachedSMSC, rep.DistinctKeys)
	}
	want := map[dedup.Outcome]uint64{dedup.OutForwarded: 10, dedup.OutConflict: 1, dedup.OutJoined: 1, dedup.OutUnknown: 4}
	for o, n := range want {
		if got := rep.Outcomes[o]; got != n {
			t.Errorf("outcome %s = %d, want %d", o, got, n)
		}
	}
	var sum uint64
	for _, n := range rep.Outcomes {
		sum += n
	}
	if sum != uint64(rep.Attempts) {
		t.Errorf("proxy decided %d submits, the ESME sent %d", sum, rep.Attempts)
	}
	s := out.String()
	// The submit of the dropped key reached the SMSC but counts as
	// unknown: the totals say so.
	if !regexp.MustCompile(`of which forwarded, the SMSC's answer lost +1\n`).MatchString(s) ||
		!regexp.MustCompile(`submits that reached the SMSC \(10 \+ 1\) +11\n`).MatchString(s) {
		t.Errorf("the totals do not say which line counts the submit whose answer was lost:\n%s", s)
	}
	if !strings.Contains(s, "Verdict: PASS") || !regexp.MustCompile(`keys at the SMSC more than once +0\n`).MatchString(s) {
		t.Errorf("report does not show the verdict:\n%s", s)
	}
	if strings.Contains(s, "Your code") {
		t.Error("the report shows message text")
	}
}
