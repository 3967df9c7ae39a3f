package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Random sequences of Create, Update, Replace, AppendHot, EnqueueAppend,
// expiry and reopen, on records of versions 3, 4 and 5, compared with a
// model of the history (StoredHistory semantics): Get and Scan must
// return exactly the model's history, and every log key read must live
// at least as long as its record.
func TestHistoryMatchesAModelUnderRandomWrites(t *testing.T) {
	for seed := uint64(1); seed <= historyModelSeeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { historyModelRun(t, seed) })
	}
}

var historyModelSeeds = func() uint64 { n, _ := strconv.ParseUint(os.Getenv("HISTORY_MODEL_SEEDS"), 10, 64); return max(n, 40) }()

func historyModelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()
	var offset atomic.Int64
	clk := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	base := time.Now().UTC().Truncate(time.Second)
	counter := 0
	ev := func() Event {
		counter++
		return Event{At: base.Add(time.Duration(counter) * time.Millisecond), State: Accepted, Note: fmt.Sprint("e", counter)}
	}
	evs := func(n int) []Event {
		out := make([]Event, n)
		for i := range out {
			out[i] = ev()
		}
		return out
	}
	keys := []Key{{Account: "a", Key: "k0"}, {Account: "a", Key: "k1"}, {Account: "a", Key: "k2"}}
	model := map[Key][]Event{}
	held := map[Key]*Record{}
	legacy := map[Key]bool{{Account: "a", Key: "k0"}: true} // version 3, not written since
	expires := map[Key]time.Time{}

	// Seed: k0 version 3 inline, k1 version 4 with a log, k2 absent.
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	exp0 := clk().Add(time.Hour)
	r0 := &Record{Key: keys[0], State: Sent, Created: base, Expires: exp0, History: evs(1 + rng.IntN(6))}
	r1 := &Record{Key: keys[1], State: Sent, Created: base, Expires: exp0, History: evs(1 + rng.IntN(8))}
	if err := db.Update(func(txn *badger.Txn) error {
		if err := txn.SetEntry(badger.NewEntry(recordKey(r0.Key), encodeRecordVersion(nil, r0, recordVersion3)).WithTTL(2 * time.Hour)); err != nil {
			return err
		}
		rk := recordKey(r1.Key)
		if err := txn.SetEntry(badger.NewEntry(rk, encodeHotVersion(nil, r1, uint32(len(r1.History)), recordVersion4)).WithTTL(2 * time.Hour)); err != nil {
			return err
		}
		for q := 1; q < len(r1.History); q++ {
			if err := txn.SetEntry(badger.NewEntry(histKey(rk, uint32(q)), encodeEvent(nil, &r1.History[q])).WithTTL(2 * time.Hour)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	model[keys[0]], model[keys[1]] = r0.History, r1.History
	expires[keys[0]], expires[keys[1]] = exp0, exp0

	open := func() *BadgerStore {
		s, err := OpenBadger(BadgerOptions{Path: dir, Now: clk, MinFreeBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	defer func() { s.Close() }()
	ctx := context.Background()
	var trace []string
	check := func() {
		t.Helper()
		for _, k := range keys {
			want, live := model[k]
			got, err := s.Get(ctx, k)
			if !live {
				if err == nil {
					t.Fatalf("Get(%s) = %q; want not found\n%v", k.Key, eventNotes(got.History), trace)
				}
				continue
			}
			if err != nil || !slices.Equal(eventNotes(got.History), eventNotes(want)) {
				var notes []string
				if got != nil {
					notes = eventNotes(got.History)
				}
				t.Fatalf("Get(%s) = %q, %v; want %q\ntrace: %v", k.Key, notes, err, eventNotes(want), trace)
			}
			// TTLs: every log key read lives as long as the record.
			rk := recordKey(k)
			s.db.View(func(txn *badger.Txn) error {
				item, err := txn.Get(rk)
				if err != nil {
					t.Fatal(err)
				}
				var r *Record
				var n uint32
				item.Value(func(v []byte) error { r, n, _, err = decodeStored(v); return err })
				for q := uint32(max(1, int64(len(r.History)), int64(n)-MaxHistory+1)); q < n; q++ {
					hi, err := txn.Get(histKey(rk, q))
					if err != nil {
						t.Fatalf("%s: log key %d of %d: %v\ntrace: %v", k.Key, q, n, err, trace)
					}
					if hi.ExpiresAt() < item.ExpiresAt() {
						t.Fatalf("%s: log key %d expires at %d, record at %d\ntrace: %v", k.Key, q, hi.ExpiresAt(), item.ExpiresAt(), trace)
					}
				}
				return nil
			})
		}
		seen := 0
		if err := s.Scan(ctx, func(r *Record) bool {
			seen++
			if want := model[r.Key]; !slices.Equal(eventNotes(r.History), eventNotes(want)) {
				t.Fatalf("Scan %s = %q; want %q\ntrace: %v", r.Key.Key, eventNotes(r.History), eventNotes(want), trace)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	check()
	qn := 0
	for step := 0; step < 60; step++ {
		k := keys[rng.IntN(len(keys))]
		cur, live := model[k]
		op := rng.IntN(16)
		if !live {
			op = 9
		}
		if op != 8 && op != 5 && !(op >= 6 && op <= 7) && op != 11 && op != 13 && op != 15 {
			delete(legacy, k)
		}
		appendN := func() int {
			if rng.IntN(12) == 0 {
				return 60 + rng.IntN(20)
			}
			return 1 + rng.IntN(3)
		}
		if op != 11 && op != 8 {
			delete(held, k)
		}
		switch op {
		case 0, 1: // Update appends
			add := evs(appendN())
			trace = append(trace, fmt.Sprintf("%s:Update+%d", k.Key, len(add)))
			if _, err := s.Update(ctx, k, func(r *Record) error { r.History = append(r.History, add...); return nil }); err != nil {
				t.Fatal(err)
			}
			model[k] = StoredHistory(cur, append(slices.Clone(cur), add...), sameEvent)
		case 2: // Update rewrites the history
			h := evs(1 + rng.IntN(7))
			trace = append(trace, fmt.Sprintf("%s:Rewrite%d", k.Key, len(h)))
			if _, err := s.Update(ctx, k, func(r *Record) error { r.History = h; return nil }); err != nil {
				t.Fatal(err)
			}
			model[k] = StoredHistory(cur, h, sameEvent)
		case 3: // Update grows Expires and appends
			add := evs(rng.IntN(2))
			trace = append(trace, fmt.Sprintf("%s:Grow+%d", k.Key, len(add)))
			expires[k] = expires[k].Add(time.Hour + time.Duration(rng.IntN(1000))*time.Minute)
			e := expires[k]
			if _, err := s.Update(ctx, k, func(r *Record) error { r.Expires = e; r.History = append(r.History, add...); return nil }); err != nil {
				t.Fatal(err)
			}
			model[k] = StoredHistory(cur, append(slices.Clone(cur), add...), sameEvent)
		case 4: // AppendHot
			add := evs(1 + rng.IntN(2))
			trace = append(trace, fmt.Sprintf("%s:AppendHot+%d", k.Key, len(add)))
			if err := s.AppendHot(ctx, k, func(r *Record) error { r.History = append(r.History, add...); return nil }); err != nil {
				t.Fatal(err)
			}
			model[k] = CapHistory(append(slices.Clone(cur), add...))
		case 5: // EnqueueAppend
			add := evs(1)
			qn++
			trace = append(trace, fmt.Sprintf("%s:EnqueueAppend+1", k.Key))
			e := &QueueEntry{Queue: "q", DedupKey: fmt.Sprint("d", qn), Body: []byte("x"), Enqueued: base, Expires: clk().Add(time.Hour)}
			_, dup, appended, err := s.EnqueueAppend(ctx, e, k, func(r *Record) error { r.History = append(r.History, add...); return nil })
			if err != nil || dup {
				t.Fatal(err, dup)
			}
			if appended {
				delete(legacy, k)
				model[k] = CapHistory(append(slices.Clone(cur), add...))
			}
		case 6, 7: // Replace of what Get returned
			old, err := s.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			next := old.Clone()
			add := evs(appendN())
			next.History = append(next.History, add...)
			trace = append(trace, fmt.Sprintf("%s:Replace+%d", k.Key, len(add)))
			if err := s.Replace(ctx, old, next); err != nil {
				t.Fatal(err)
			}
			model[k] = StoredHistory(cur, next.History, sameEvent)
		case 10: // Update appends with the caller's trim (dedup's addEvent)
			add := evs(appendN())
			trace = append(trace, fmt.Sprintf("%s:UpdateTrim+%d", k.Key, len(add)))
			if _, err := s.Update(ctx, k, func(r *Record) error {
				for _, e := range add {
					r.History = append(r.History, e)
					if n := len(r.History); n > MaxHistory {
						r.History = append(r.History[:1], r.History[n-MaxHistory+1:]...)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			model[k] = StoredHistory(cur, append(slices.Clone(cur), add...), sameEvent)
		case 11: // Replace of the record held from the last Replace (uncapped)
			old := held[k]
			if old == nil {
				g, err := s.Get(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				old = g
			}
			next := old.Clone()
			add := evs(appendN())
			next.History = append(next.History, add...)
			trace = append(trace, fmt.Sprintf("%s:ReplaceHeld(%d)+%d", k.Key, len(old.History), len(add)))
			if err := s.Replace(ctx, old, next); err != nil {
				t.Fatal(err)
			}
			model[k] = CapHistory(append(slices.Clone(cur), add...))
			held[k] = next
		case 12: // Update empties the history
			trace = append(trace, fmt.Sprintf("%s:Empty", k.Key))
			if _, err := s.Update(ctx, k, func(r *Record) error { r.History = nil; return nil }); err != nil {
				t.Fatal(err)
			}
			model[k] = nil
		case 13: // Replace with a rewritten history
			old, err := s.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			next := old.Clone()
			next.History = evs(1 + rng.IntN(7))
			trace = append(trace, fmt.Sprintf("%s:ReplaceRewrite%d", k.Key, len(next.History)))
			if err := s.Replace(ctx, old, next); err != nil {
				t.Fatal(err)
			}
			model[k] = StoredHistory(cur, next.History, sameEvent)
		case 14: // AppendHot that also grows Expires (done as Update)
			add := evs(1)
			expires[k] = expires[k].Add(time.Duration(1+rng.IntN(1000)) * time.Minute)
			e := expires[k]
			trace = append(trace, fmt.Sprintf("%s:AppendHotGrow+1", k.Key))
			if err := s.AppendHot(ctx, k, func(r *Record) error { r.Expires = e; r.History = append(r.History, add...); return nil }); err != nil {
				t.Fatal(err)
			}
			model[k] = CapHistory(append(slices.Clone(cur), add...))
		case 15: // Replace that grows Expires
			old, err := s.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			next := old.Clone()
			add := evs(rng.IntN(3))
			next.History = append(next.History, add...)
			expires[k] = expires[k].Add(time.Duration(1+rng.IntN(1000)) * time.Minute)
			next.Expires = expires[k]
			trace = append(trace, fmt.Sprintf("%s:ReplaceGrow+%d", k.Key, len(add)))
			if err := s.Replace(ctx, old, next); err != nil {
				t.Fatal(err)
			}
			model[k] = StoredHistory(cur, next.History, sameEvent)
		case 8: // reopen
			trace = append(trace, "reopen")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open()
		case 9: // expire it (if live) and create it again
			if live {
				trace = append(trace, fmt.Sprintf("%s:Expire", k.Key))
				offset.Add(int64(expires[k].Sub(clk()) + time.Second))
				for kk, e := range expires {
					if _, ok := model[kk]; ok && !clk().Before(e) {
						delete(model, kk)
					}
				}
			}
			h := evs(1 + rng.IntN(6))
			trace = append(trace, fmt.Sprintf("%s:Create%d", k.Key, len(h)))
			e := clk().Add(time.Hour + time.Duration(rng.IntN(1000))*time.Minute)
			if _, created, err := s.Create(ctx, &Record{Key: k, State: Sent, Created: clk(), Expires: e, History: h}); err != nil || !created {
				t.Fatal(err, created)
			}
			model[k], expires[k] = CapHistory(h), e
		}
		check()
	}
}
