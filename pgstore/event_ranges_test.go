package pgstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

func evs(now time.Time, prefix string, n int) []state.Event {
	h := []state.Event{}
	for i := range n {
		h = append(h, state.Event{At: now, State: state.Sent, Note: fmt.Sprintf("%s%d", prefix, i)})
	}
	return h
}

func wseqOf(t *testing.T, s *Store, k state.Key) int64 {
	t.Helper()
	var w int64
	if err := s.pool.QueryRow(bg, `SELECT wseq FROM records WHERE account = $1 AND key = $2 AND segment = $3`,
		col(k.Account), col(k.Key), col(k.Segment)).Scan(&w); err != nil {
		t.Fatal(err)
	}
	return w
}

func wantNotes(t *testing.T, s *Store, k state.Key, want []string) {
	t.Helper()
	got := notes(mustGet(t, s, k).History)
	if !slices.Equal(got, want) {
		t.Errorf("%s: history %q, want %q", k.Key, got, want)
	}
}

func pre(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// Each of the four multi-row statements with rows of empty and non-empty
// histories and added events mixed in one statement: each row gets its
// own range of the flat array, and an empty range is '{}'.
func TestRowsWithAndWithoutEventsInOneBatchStatementEachWriteTheirOwn(t *testing.T) {
	t.Parallel()
	s := openTest(t, Options{})
	now := time.Now()
	sizes := []int{0, 3, 0, 0, 2, 1, 0}
	var keys []state.Key
	var reqs []*request
	for i, n := range sizes {
		r := sentRecord(now, fmt.Sprint("c", i), "test-1/1", uint32(i+1))
		r.History = evs(now, fmt.Sprintf("c%d.", i), n)
		keys = append(keys, r.Key)
		reqs = append(reqs, &request{order: keyOrder(r.Key), create: newCreateOp(r, unixNano(now))})
	}
	if err := s.exec(reqs); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if !reqs[i].create.created {
			t.Fatalf("%v not created", k)
		}
		wantNotes(t, s, k, pre(fmt.Sprintf("c%d.", i), sizes[i]))
	}

	// Replaces: appended (empty and not), rewritten, and one of a gone row.
	reqs = nil
	type rp struct {
		k       state.Key
		rewrite bool
		hist    []state.Event
		add     []state.Event
		want    []string
	}
	gone := state.Key{Account: "acme", Key: "gone"}
	rps := []rp{
		{k: keys[0], add: evs(now, "ra", 2), want: pre("ra", 2)},
		{k: keys[1], add: nil, want: pre("c1.", 3)},
		{k: keys[2], rewrite: true, hist: evs(now, "rw", 2), want: pre("rw", 2)},
		{k: gone, hist: evs(now, "g", 2), want: pre("g", 2)},
		{k: keys[4], add: evs(now, "rb", 1), want: append(pre("c4.", 2), "rb0")},
		{k: keys[5], rewrite: true, hist: []state.Event{}, want: nil},
	}
	for i, p := range rps {
		r := sentRecord(now, p.k.Key, "test-1/1", uint32(100+i))
		var h [][]byte
		if p.rewrite || p.k == gone {
			h = encodeEvents(p.hist)
		}
		op := &replaceOp{args: recordArgs(r, h), rewrite: p.rewrite, added: encodeEvents(p.add), oldState: string(state.Sent), oldOwner: "test-1"}
		reqs = append(reqs, &request{order: keyOrder(p.k), replace: op})
	}
	if err := s.exec(reqs); err != nil {
		t.Fatal(err)
	}
	for i, p := range rps {
		if !reqs[i].replace.applied {
			t.Errorf("replace %s not applied", p.k.Key)
		}
		wantNotes(t, s, p.k, p.want)
	}

	// CAS: append empty, append some, rewrite, rewrite to empty.
	reqs = nil
	type cp struct {
		k      state.Key
		append bool
		ev     []state.Event
		want   []string
	}
	cps := []cp{
		{k: keys[0], append: true, ev: nil, want: pre("ra", 2)},
		{k: keys[1], append: true, ev: evs(now, "ca", 2), want: append(pre("c1.", 3), pre("ca", 2)...)},
		{k: keys[2], append: false, ev: evs(now, "cw", 3), want: pre("cw", 3)},
		{k: keys[3], append: false, ev: nil, want: nil},
		{k: keys[4], append: true, ev: evs(now, "cb", 1), want: append(append(pre("c4.", 2), "rb0"), "cb0")},
	}
	var cops []*casOp
	for i, p := range cps {
		r := mustGet(t, s, p.k)
		r.Sequence = uint32(200 + i)
		op := &casOp{expect: wseqOf(t, s, p.k), append: p.append}
		if p.append {
			op.args, op.added = recordArgs(r, nil), encodeEvents(p.ev)
		} else {
			op.args = recordArgs(r, encodeEvents(p.ev))
		}
		cops = append(cops, op)
		reqs = append(reqs, &request{order: keyOrder(p.k), cas: op})
	}
	if err := s.exec(reqs); err != nil {
		t.Fatal(err)
	}
	for i, p := range cps {
		if !cops[i].applied {
			t.Errorf("cas %s not applied", p.k.Key)
		}
		wantNotes(t, s, p.k, p.want)
	}

	// EnqueueAppend: appended empty and non-empty, and a plain enqueue.
	reqs = nil
	type ep struct {
		k    state.Key
		ev   []state.Event
		want []string
	}
	eps := []ep{
		{k: keys[0], ev: nil, want: pre("ra", 2)},
		{k: keys[1], ev: evs(now, "ea", 2), want: append(append(pre("c1.", 3), pre("ca", 2)...), pre("ea", 2)...)},
		{k: keys[5], ev: nil, want: nil},
		{k: keys[6], ev: evs(now, "eb", 1), want: pre("eb", 1)},
	}
	var eops []*enqueueOp
	for i, p := range eps {
		r := mustGet(t, s, p.k)
		r.Sequence = uint32(300 + i)
		e := receiptEntry(now, fmt.Sprint("d", i))
		op := &enqueueOp{queue: col(e.Queue), dedup: col(e.DedupKey), expires: expiresNS(e.Expires), entry: encodeEntry(e),
			now: unixNano(now), app: newRecordAppend(r, encodeEvents(p.ev), wseqOf(t, s, p.k))}
		eops = append(eops, op)
		reqs = append(reqs, &request{seqLock: true, enqueue: op, order: lockOrder{table: orderMarker}})
	}
	e := receiptEntry(now, "")
	plain := &enqueueOp{queue: col(e.Queue), expires: expiresNS(e.Expires), entry: encodeEntry(e), now: unixNano(now)}
	reqs = append(reqs, &request{seqLock: true, enqueue: plain, order: lockOrder{table: orderMarker}})
	if err := s.exec(reqs); err != nil {
		t.Fatal(err)
	}
	for i, p := range eps {
		if !eops[i].appended || eops[i].err != nil {
			t.Errorf("enqueue %s appended %v err %v", p.k.Key, eops[i].appended, eops[i].err)
		}
		wantNotes(t, s, p.k, p.want)
	}
}
