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

// hasJournal reports whether r is journaled on session sess with seq.
func hasJournal(r *Record, sess string, seq uint32) bool {
	return r != nil && sess != "" && r.Session == sess && r.Sequence == seq
}

// ctxErr returns ctx's error, if it is already done, wrapped for the
// caller; nil otherwise.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}
