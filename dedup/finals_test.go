package dedup

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	f.learn(&state.Record{Key: state.Key{Account: "shop", Key: "k2"}, State: state.Accepted, MessageID: "m2", Upstream: "smsc-a", FingerprintVersion: state.FingerprintSHA256})
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
		r.State != state.Accepted || !r.Created.IsZero() || !r.Expires.IsZero() || r.FingerprintVersion != state.FingerprintSHA256 {
		t.Errorf("second record = %+v, want accepted m2 from smsc-a with zero times and the legacy fingerprint", r)
	}
}

// The id the client was given is always remembered: a proxy id with an
// upstream id too long to keep beside it is kept alone (the answer reads
// only the proxy id), and only an upstream id over SMPP's 64 octets is
// not remembered, replacing what was remembered of its key before.
func TestFinalsKeepTheClientsIDWhenBothIDsDoNotFit(t *testing.T) {
	f := newFinalsOf(4, 4)
	k := state.Key{Account: "a", Key: "k"}
	up, px := strings.Repeat("7", 64), strings.Repeat("p", 64)
	f.put(&state.Record{Key: k, State: state.Accepted, MessageID: up, ProxyID: px})
	if r := remembered(f, k); r == nil || r.ClientMessageID() != px || r.MessageID != "" {
		t.Errorf("remembered %+v, want the 64-octet proxy id alone", r)
	}
	f.put(&state.Record{Key: k, State: state.Accepted, MessageID: up[:44], ProxyID: px[:20]})
	if r := remembered(f, k); r == nil || r.MessageID != up[:44] || r.ProxyID != px[:20] {
		t.Errorf("remembered %+v, want both ids (64 octets together)", r)
	}
	f.put(&state.Record{Key: k, State: state.Accepted, MessageID: up})
	if r := remembered(f, k); r == nil || r.ClientMessageID() != up {
		t.Errorf("remembered %+v, want the 64-octet upstream id", r)
	}
	f.put(&state.Record{Key: k, State: state.Accepted, MessageID: up + "8"})
	if r := remembered(f, k); r != nil {
		t.Errorf("remembered %q after a record with a 65-octet id replaced it; want nothing (read the store)", r.MessageID)
	}
}

// Keys that differ only in where their fields end are different keys: a
// key may hold any octet, NUL included.
func TestFinalsTellKeysApartWhateverOctetsTheyHold(t *testing.T) {
	f := newFinalsOf(4, 4)
	a := state.Key{Account: "a", Key: "k\x00", Segment: "2/3"}
	b := state.Key{Account: "a", Key: "k", Segment: "\x002/3"}
	f.put(&state.Record{Key: a, State: state.Accepted, MessageID: "A"})
	if r := remembered(f, b); r != nil {
		t.Errorf("key %q segment %q answered by the record of key %q: %+v", b.Key, b.Segment, a.Key, r)
	}
}

// A ring larger than one chunk, of a size no multiple of it, forgets
// exactly its oldest entries as it wraps, over and over.
func TestFinalsForgetExactlyTheOldestAcrossChunks(t *testing.T) {
	const limit = ringChunk + 3
	f := newFinalsOf(limit, 2)
	key := func(i int) state.Key { return state.Key{Account: "a", Key: fmt.Sprint(i)} }
	for i := range 3 * limit {
		f.put(&state.Record{Key: key(i), State: state.Accepted, MessageID: fmt.Sprint(i)})
	}
	for i := range 3 * limit {
		r := remembered(f, key(i))
		if want := i >= 2*limit; (r != nil) != want || (r != nil && r.MessageID != fmt.Sprint(i)) {
			t.Fatalf("key %d remembered = %+v, want %v (the last %d)", i, r, want, limit)
		}
	}
	if len(f.m) != limit || len(f.decided.chunks) != 2 || len(f.decided.chunks[1]) != 3 {
		t.Errorf("%d entries in %d chunks (the last of %d slots); want %d in 2, the last of 3",
			len(f.m), len(f.decided.chunks), len(f.decided.chunks[len(f.decided.chunks)-1]), limit)
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

// smppproxy_dedup_settled_lookups_total says where a decision found the
// settled record of a retry: the engine's memory of recent answers, or
// the store (an engine that does not remember the key, as after a
// restart or on another instance).
func TestSettledLookupsCountWhereARetryWasAnswered(t *testing.T) {
	st := state.NewMem(nil)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	first := newTestEngine(t, Config{Store: st, Forwarder: &fakeForwarder{}, InstanceID: "a", Metrics: m})
	if a := first.Submit(ctx, "shop", Policy{}, submit(t, "k-1", "hello")); a.Outcome != OutForwarded {
		t.Fatalf("first submit = %s, want forwarded", a.Outcome)
	}
	if a := first.Submit(ctx, "shop", Policy{}, submit(t, "k-1", "hello")); a.Outcome != OutReplayed {
		t.Fatalf("retry on the same engine = %s, want replayed", a.Outcome)
	}
	other := newTestEngine(t, Config{Store: st, Forwarder: &fakeForwarder{}, InstanceID: "b", Metrics: m, Secret: first.cfg.Secret})
	for range 2 {
		if a := other.Submit(ctx, "shop", Policy{}, submit(t, "k-1", "hello")); a.Outcome != OutReplayed {
			t.Fatalf("retry on an engine that did not settle the key = %s, want replayed", a.Outcome)
		}
	}
	// An engine that creates unremembered keys without reading them
	// first (CreateFirst, the shared store) finds the record by its create.
	third := newTestEngine(t, Config{Store: st, Forwarder: &fakeForwarder{}, InstanceID: "c", Metrics: m, Secret: first.cfg.Secret, CreateFirst: true})
	if a := third.Submit(ctx, "shop", Policy{}, submit(t, "k-1", "hello")); a.Outcome != OutReplayed {
		t.Fatalf("retry on an engine that creates first = %s, want replayed", a.Outcome)
	}
	// The first engine's retry came from memory; the other engine read
	// the record once, then remembered it; the third found it by its create.
	for source, want := range map[string]float64{"memory": 2, "store": 2} {
		if got := testutil.ToFloat64(m.settled.WithLabelValues(source)); got != want {
			t.Errorf("settled lookups from %s = %v, want %v", source, got, want)
		}
	}
}

// A RecentAnswers of 0 or below (an engine built without the
// configuration's check) remembers the default number of answers.
func TestRecentAnswersNotAboveZeroMeanTheDefault(t *testing.T) {
	for _, n := range []int{0, -1} {
		if got := newFinals(recentAnswers(n)).decided.limit; got != finalsCap {
			t.Errorf("RecentAnswers %d remembers %d answers, want the default %d", n, got, finalsCap)
		}
	}
}
