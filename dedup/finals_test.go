package dedup

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

// The answers of a burst of a quarter of a million fresh submits (about
// nine seconds at 30,000/s) are all remembered: their retries are
// answered without reading the store.
func TestFinalsRememberTheAnswersOfAQuarterMillionSubmits(t *testing.T) {
	const n = 250_000
	f := newFinals(finalsCap)
	key := func(i int) state.Key { return state.Key{Account: "shop", Key: fmt.Sprintf("otp-%09d", i)} }
	now := time.Unix(1_800_000_000, 0).UTC()
	for i := range n {
		f.put(&state.Record{Key: key(i), State: state.Accepted, MessageID: fmt.Sprintf("%016x", i),
			Upstream: "smsc", Created: now, Expires: now.Add(72 * time.Hour)})
	}
	missed := 0
	var r state.Record
	for i := range n {
		if !f.get(key(i), &r) || r.MessageID != fmt.Sprintf("%016x", i) {
			missed++
		}
	}
	if missed > 0 {
		t.Errorf("%d of the last %d answers not remembered (or remembered wrong)", missed, n)
	}
}

// What a remembered record is made of again is what a decision reads of
// the record put: every field, times to the nanosecond and in UTC like a
// record read from the store, the zero time as zero.
func TestFinalsGiveBackWhatADecisionReadsOfTheRecord(t *testing.T) {
	f := newFinalsOf(4, 4)
	created := time.Date(2026, 12, 6, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	put := &state.Record{
		Key:         state.Key{Account: "shop", Key: "k1", Segment: "2/3"},
		Fingerprint: [32]byte{1, 2, 3, 31: 9}, FingerprintVersion: state.FingerprintHMAC,
		State: state.Rejected, Status: 0x45, MessageID: "", ProxyID: "p-1", Upstream: "smsc-b",
		Created: created, Expires: created.Add(time.Hour),
		Owner: "host-1", Session: "smsc/1", History: []state.Event{{Note: "created"}},
	}
	f.put(put)
	f.learn(&state.Record{Key: state.Key{Account: "shop", Key: "k2"}, State: state.Accepted, MessageID: "m2", Upstream: "smsc-a"})
	var r state.Record
	if !f.get(put.Key, &r) {
		t.Fatal("record not remembered")
	}
	want := state.Record{Key: put.Key, Fingerprint: put.Fingerprint, FingerprintVersion: put.FingerprintVersion,
		State: put.State, Status: put.Status, ProxyID: put.ProxyID, Upstream: put.Upstream,
		Created: created.UTC(), Expires: created.Add(time.Hour).UTC()}
	if fmt.Sprintf("%#v", r) != fmt.Sprintf("%#v", want) {
		t.Errorf("remembered\n%#v\nwant\n%#v", r, want)
	}
	if !f.get(state.Key{Account: "shop", Key: "k2"}, &r) || r.Upstream != "smsc-a" || r.MessageID != "m2" ||
		r.State != state.Accepted || !r.Created.IsZero() || !r.Expires.IsZero() {
		t.Errorf("second record = %+v, want accepted m2 from smsc-a with zero times", r)
	}
}

// A record whose ids do not fit a slot is not remembered (its retries
// read the store), and replaces what was remembered of its key before.
func TestFinalsDoNotRememberARecordWhoseIDsDoNotFit(t *testing.T) {
	f := newFinalsOf(4, 4)
	k := state.Key{Account: "a", Key: "k"}
	f.put(&state.Record{Key: k, State: state.Accepted, MessageID: "short"})
	long := strings.Repeat("7", 40)
	f.put(&state.Record{Key: k, State: state.Accepted, MessageID: long, ProxyID: strings.Repeat("p", slotIDs-40+1)})
	if r := remembered(f, k); r != nil {
		t.Errorf("remembered %q after a record with ids too long replaced it; want nothing (read the store)", r.MessageID)
	}
	f.put(&state.Record{Key: k, State: state.Accepted, MessageID: long, ProxyID: strings.Repeat("p", slotIDs-40)})
	if r := remembered(f, k); r == nil || r.MessageID != long || len(r.ProxyID) != slotIDs-40 {
		t.Errorf("remembered %+v, want ids that just fit kept whole", r)
	}
}

// The rings take memory as they fill, not when made.
func TestFinalsTakeMemoryAsTheyFill(t *testing.T) {
	f := newFinals(finalsCap)
	if len(f.decided.chunks) != 0 || len(f.read.chunks) != 0 {
		t.Fatalf("empty finals hold %d+%d chunks, want none", len(f.decided.chunks), len(f.read.chunks))
	}
	for i := range ringChunk + 1 {
		f.put(&state.Record{Key: state.Key{Account: "a", Key: fmt.Sprint(i)}, State: state.Accepted})
	}
	if len(f.decided.chunks) != 2 {
		t.Errorf("%d answers held in %d chunks, want 2", ringChunk+1, len(f.decided.chunks))
	}
}
