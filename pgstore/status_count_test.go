package pgstore

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// `smppproxy store status` counts the live records by state over at most
// a bounded number of them (a store holds hours of traffic: counting all
// of it would read the whole table on every call) and says when the
// store holds more; expired records are not counted.
func TestStoreStatusCountsAtMostTheLimitAndSaysWhenThereAreMore(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	fillRecords(t, s, "a", "accepted", 7, c.Now().Add(time.Hour))
	fillRecords(t, s, "b", "unknown", 3, c.Now().Add(time.Hour))
	fillRecords(t, s, "c", "accepted", 50, c.Now().Add(-time.Minute)) // expired

	all, err := readStatus(bg, s.pool, s.opts.Schema, c.Now(), 100)
	if err != nil {
		t.Fatalf("readStatus = %v", err)
	}
	if all.Records[state.Accepted] != 7 || all.Records[state.Unknown] != 3 || all.RecordsCapped {
		t.Errorf("status under the limit = %v capped %v; want 7 accepted, 3 unknown, not capped", all.Records, all.RecordsCapped)
	}

	capped, err := readStatus(bg, s.pool, s.opts.Schema, c.Now(), 4)
	if err != nil {
		t.Fatalf("readStatus = %v", err)
	}
	n := 0
	for _, v := range capped.Records {
		n += v
	}
	if n != 4 || !capped.RecordsCapped {
		t.Errorf("status over the limit = %v (%d in all) capped %v; want 4 counted and capped", capped.Records, n, capped.RecordsCapped)
	}
}
