package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// MemStore is an in-memory Store and Queue for tests: one mutex and a few
// maps. Records and queue entries are kept in their encoded form, so what
// comes back has gone through the same encoding as with BadgerStore (times
// in UTC, no monotonic reading, no shared slices). Nothing survives the
// process.
type MemStore struct {
	now func() time.Time

	mu     sync.Mutex
	closed bool
	recs   map[Key][]byte // encoded records, expired ones included
	idx    map[string]Key // index key (same layout as BadgerStore's) → record key
	queues memQueues
}

var (
	_ Store     = (*MemStore)(nil)
	_ HotReader = (*MemStore)(nil)
	_ Queue     = (*MemStore)(nil)
)

// NewMem returns an empty MemStore whose notion of "now" (for Expires) is
// now, or time.Now when now is nil.
func NewMem(now func() time.Time) *MemStore {
	if now == nil {
		now = time.Now
	}
	return &MemStore{
		now:    now,
		recs:   make(map[Key][]byte),
		idx:    make(map[string]Key),
		queues: newMemQueues(),
	}
}

// Create implements Store. On created=true, existing is nil.
func (s *MemStore) Create(ctx context.Context, rec *Record) (*Record, bool, error) {
	if rec == nil {
		return nil, false, errNilRecord
	}
	if err := ctxErr(ctx); err != nil {
		return nil, false, err
	}
	val := encodeRecord(nil, rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writableLocked(); err != nil {
		return nil, false, err
	}
	old, err := s.getLocked(rec.Key)
	if err != nil {
		return nil, false, err
	}
	if old != nil && !old.Expired(s.now()) {
		return old, false, nil
	}
	if len(rec.History) > MaxHistory {
		c := rec.Clone()
		c.History = CapHistory(c.History)
		val = encodeRecord(nil, c)
	}
	s.putLocked(rec.Key, val, old, rec)
	return nil, true, nil
}

// Replace implements Store. Like BadgerStore's, it does not look at the
// stored record: the history is old's with rec's new events.
func (s *MemStore) Replace(ctx context.Context, old, rec *Record) error {
	if old == nil || rec == nil {
		return errNilRecord
	}
	if old.Key != rec.Key {
		return fmt.Errorf("%w: %v, %v", errReplaceKey, old.Key, rec.Key)
	}
	if err := ctxErr(ctx); err != nil {
		return err
	}
	c := rec.Clone()
	c.History = StoredHistory(old.History, rec.History, sameEvent)
	val := encodeRecord(nil, c)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writableLocked(); err != nil {
		return err
	}
	s.putLocked(rec.Key, val, old, rec)
	return nil
}

// ScanState implements Store.
func (s *MemStore) ScanState(ctx context.Context, st SubmitState, fn func(*Record) bool) error {
	return s.Scan(ctx, func(r *Record) bool { return r.State != st || fn(r) })
}

// Get implements Store.
func (s *MemStore) Get(ctx context.Context, k Key) (*Record, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return s.liveLocked(k)
}

// GetHot implements HotReader.
func (s *MemStore) GetHot(ctx context.Context, k Key) (*Record, error) {
	r, err := s.Get(ctx, k)
	if r != nil {
		r.History = nil
	}
	return r, err
}

// Update implements Store.
func (s *MemStore) Update(ctx context.Context, k Key, fn func(*Record) error) (*Record, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writableLocked(); err != nil {
		return nil, err
	}
	cur, err := s.liveLocked(k)
	if err != nil {
		return nil, err
	}
	next, err := runUpdate(cur, fn)
	if err != nil {
		return cur, err
	}
	next.History = StoredHistory(cur.History, next.History, sameEvent)
	val := encodeRecord(nil, next)
	s.putLocked(k, val, cur, next)
	return decodeRecord(val)
}

// ByMessageID implements Store.
func (s *MemStore) ByMessageID(ctx context.Context, upstream, id string) (*Record, error) {
	return s.byIndex(ctx, messageKey(upstream, id), func(r *Record) bool {
		return hasMessage(r, upstream, id)
	})
}

// ByProxyID implements Store.
func (s *MemStore) ByProxyID(ctx context.Context, account, id string) (*Record, error) {
	return s.byIndex(ctx, proxyIDKey(account, id), func(r *Record) bool {
		return hasProxyID(r, account, id)
	})
}

// UnknownByAddr implements Store.
func (s *MemStore) UnknownByAddr(ctx context.Context, upstream string, h [16]byte) ([]*Record, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if h == ([16]byte{}) {
		return nil, nil
	}
	prefix := string(unknownPrefix(upstream, h))
	var out []*Record
	for ik, k := range s.idx {
		if !strings.HasPrefix(ik, prefix) {
			continue
		}
		r, err := s.liveLocked(k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if isUnknownAt(r, upstream, h) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *MemStore) byIndex(ctx context.Context, ik []byte, match func(*Record) bool) (*Record, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	k, ok := s.idx[string(ik)]
	if !ok {
		return nil, ErrNotFound
	}
	r, err := s.liveLocked(k)
	if err != nil {
		return nil, err
	}
	if !match(r) {
		return nil, ErrNotFound
	}
	return r, nil
}

// Scan implements Store. It decodes a snapshot under the lock and calls fn
// without it.
func (s *MemStore) Scan(ctx context.Context, fn func(*Record) bool) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	now := s.now()
	live := make([]*Record, 0, len(s.recs))
	for _, v := range s.recs {
		r, err := decodeRecord(v)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		if !r.Expired(now) {
			live = append(live, r)
		}
	}
	s.mu.Unlock()
	for i, r := range live {
		if i%256 == 255 {
			if err := ctxErr(ctx); err != nil {
				return err
			}
		}
		if !fn(r) {
			return nil
		}
	}
	return nil
}

// Close implements Store. Closing twice is harmless.
func (s *MemStore) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

func (s *MemStore) writableLocked() error {
	if s.closed {
		return ErrClosed
	}
	return nil
}

// getLocked returns the stored record under k, expired or not, or nil.
func (s *MemStore) getLocked(k Key) (*Record, error) {
	v, ok := s.recs[k]
	if !ok {
		return nil, nil
	}
	return decodeRecord(v)
}

// liveLocked returns the live record under k or ErrNotFound.
func (s *MemStore) liveLocked(k Key) (*Record, error) {
	r, err := s.getLocked(k)
	if err != nil {
		return nil, err
	}
	if r == nil || r.Expired(s.now()) {
		return nil, ErrNotFound
	}
	return r, nil
}

// putLocked stores val (the encoding of next) under k and moves the index
// entries from old (the previous record under k, or nil) to next. An index
// entry that another record has taken over since is left alone.
func (s *MemStore) putLocked(k Key, val []byte, old, next *Record) {
	s.recs[k] = val
	keep := map[string]bool{}
	for _, ik := range indexKeys(next) {
		keep[string(ik)] = true
	}
	for _, ik := range indexKeys(old) {
		if !keep[string(ik)] && s.idx[string(ik)] == k {
			delete(s.idx, string(ik))
		}
	}
	for ik := range keep {
		s.idx[ik] = k
	}
}
