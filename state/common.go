package state

import (
	"context"
	"errors"
	"fmt"
)

// errNilRecord is returned by Create(ctx, nil).
var errNilRecord = errors.New("state: Create of a nil record")

// runUpdate calls fn on a copy of cur and returns the copy fn produced.
// It turns a panic in fn into an error (fn runs on the committer goroutine
// of BadgerStore, where a panic would take the whole proxy down) and
// refuses a change of Key: a record is always stored under its own key.
func runUpdate(cur *Record, fn func(*Record) error) (next *Record, err error) {
	next = cur.Clone()
	defer func() {
		if p := recover(); p != nil {
			next, err = nil, fmt.Errorf("state: Update(%v) function panicked: %v", cur.Key, p)
		}
	}()
	if err := fn(next); err != nil {
		return nil, err
	}
	if next.Key != cur.Key {
		return nil, fmt.Errorf("state: Update(%v) function changed the key to %v", cur.Key, next.Key)
	}
	return next, nil
}

// hasMessage reports whether r is the record that upstream accepted with id
// (compared with its MatchID).
func hasMessage(r *Record, upstream, id string) bool {
	return r != nil && id != "" && r.Upstream == upstream && r.MatchID() == id
}

// hasProxyID reports whether r is the record of account issued proxy id id.
func hasProxyID(r *Record, account, id string) bool {
	return r != nil && id != "" && r.Key.Account == account && r.ProxyID == id
}

// isUnknownAt reports whether r is an unknown record of upstream with
// addresses h.
func isUnknownAt(r *Record, upstream string, h [16]byte) bool {
	return r != nil && inUnknownIndex(r) && r.Upstream == upstream && r.AddrHash == h
}

// ctxErr returns ctx's error, if it is already done, wrapped for the
// caller; nil otherwise.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

// MaxHistory is the most events a record's history keeps: the first one
// and the latest MaxHistory-1 (older ones are dropped as new ones come).
// Every Store applies it on write; a caller may trim the same way first.
const MaxHistory = 64

// CapHistory returns h kept within MaxHistory: its first event and the
// latest ones. It returns h itself when it is short enough. Generic so
// that a store keeping its events encoded caps them the same way.
func CapHistory[E any](h []E) []E {
	if len(h) <= MaxHistory {
		return h
	}
	out := make([]E, 0, MaxHistory)
	out = append(out, h[0])
	return append(out, h[len(h)-MaxHistory+1:]...)
}

func sameEvent(a, b *Event) bool {
	return a.At.Equal(b.At) && a.State == b.State && a.Status == b.Status && a.Session == b.Session &&
		a.Sequence == b.Sequence && a.MessageID == b.MessageID && a.Note == b.Note
}

// historyDelta is HistoryDelta of events.
func historyDelta(old, next []Event) (added []Event, rewrite bool) {
	return HistoryDelta(old, next, sameEvent)
}

// HistoryDelta compares the history of a record (old) with the history a
// writer gives its next version (next), events being equal by same. When
// next is old with events appended — possibly trimmed like CapHistory,
// keeping the first event — it returns those events; otherwise rewrite is
// true (the writer replaced the history: it is stored anew).
func HistoryDelta[E any](old, next []E, same func(a, b *E) bool) (added []E, rewrite bool) {
	if len(old) == 0 {
		return next, false
	}
	if len(next) == 0 || !same(&next[0], &old[0]) {
		return nil, true
	}
	last := &old[len(old)-1]
	lo := 1 // where old's last event may stand in next
	if len(old) == 1 {
		lo = 0
	}
	for i := len(next) - 1; i >= lo; i-- {
		if same(&next[i], last) && tailMatches(old, next, i, same) {
			return next[i+1:], false
		}
	}
	return nil, true
}

// tailMatches reports whether the events before next[i] match those
// before old's last one, back to the first event (which is kept apart).
func tailMatches[E any](old, next []E, i int, same func(a, b *E) bool) bool {
	for t := 1; ; t++ {
		oi, ni := len(old)-1-t, i-t
		if oi < 1 || ni < 1 {
			// Aligned back to the first event, or next trimmed old's
			// older events; not when next has events old has not.
			return ni < 1
		}
		if !same(&old[oi], &next[ni]) {
			return false
		}
	}
}

// StoredHistory is the history a store keeps when a writer turns a record
// with history old into one with history next (see HistoryDelta).
func StoredHistory[E any](old, next []E, same func(a, b *E) bool) []E {
	added, rewrite := HistoryDelta(old, next, same)
	if rewrite {
		return CapHistory(next)
	}
	return CapHistory(append(old[:len(old):len(old)], added...))
}
