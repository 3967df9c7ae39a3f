package state

import (
	"context"
	"sort"
)

// memQueues is MemStore's Queue state; MemStore.mu guards it.
type memQueues struct {
	seq     uint64
	entries map[string]map[uint64][]byte // queue → seq → encoded entry
	markers map[string]dedupMarker       // string(dedupKey(queue, key)) → marker
}

func newMemQueues() memQueues {
	return memQueues{entries: map[string]map[uint64][]byte{}, markers: map[string]dedupMarker{}}
}

// Enqueue implements Queue.
func (s *MemStore) Enqueue(ctx context.Context, e *QueueEntry) (uint64, bool, error) {
	if e == nil {
		return 0, false, errNilEntry
	}
	if err := ctxErr(ctx); err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writableLocked(); err != nil {
		return 0, false, err
	}
	q := &s.queues
	var mk string
	if e.DedupKey != "" {
		mk = string(dedupKey(e.Queue, e.DedupKey))
		if m, ok := q.markers[mk]; ok && m.live(s.now()) {
			return m.seq, true, nil
		}
	}
	q.seq++
	if q.entries[e.Queue] == nil {
		q.entries[e.Queue] = map[uint64][]byte{}
	}
	q.entries[e.Queue][q.seq] = encodeEntry(nil, cloneEntry(e, q.seq))
	if mk != "" {
		q.markers[mk] = dedupMarker{seq: q.seq, expires: e.Expires}
	}
	return q.seq, false, nil
}

// List implements Queue.
func (s *MemStore) List(ctx context.Context, queue string, after uint64, limit int) ([]*QueueEntry, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	now := s.now()
	var seqs []uint64
	for seq := range s.queues.entries[queue] {
		if seq > after {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	var out []*QueueEntry
	for _, seq := range seqs {
		if len(out) >= limit {
			break
		}
		e, err := decodeEntry(s.queues.entries[queue][seq])
		if err != nil {
			return nil, err
		}
		if !e.Expired(now) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Ack implements Queue.
func (s *MemStore) Ack(ctx context.Context, queue string, seq uint64) error {
	return s.AckAll(ctx, queue, []uint64{seq})
}

// Depths implements Queue.
func (s *MemStore) Depths(ctx context.Context) (map[string]int, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	now := s.now()
	out := map[string]int{}
	for q, es := range s.queues.entries {
		for _, b := range es {
			e, err := decodeEntry(b)
			if err != nil {
				return nil, err
			}
			if !e.Expired(now) {
				out[q]++
			}
		}
	}
	return out, nil
}

// AckAll acknowledges the entries seqs of queue at once.
func (s *MemStore) AckAll(ctx context.Context, queue string, seqs []uint64) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writableLocked(); err != nil {
		return err
	}
	for _, seq := range seqs {
		delete(s.queues.entries[queue], seq)
	}
	if len(s.queues.entries[queue]) == 0 {
		delete(s.queues.entries, queue)
	}
	return nil
}
