package storetest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/smppproxy/smppproxy/state"
)

// Faulty wraps a store and its delivery queue so that a test can make
// writes fail, as when the disk is full: after FailWrites(err), Create,
// Update, Replace, Enqueue and Ack return an error wrapping err and change
// nothing; FailWrites(nil) lets writes through again. Reads always go through. The
// fault injection lives here, with the tests, not in the backends.
type Faulty struct {
	state.Store
	q    state.Queue
	fail atomic.Pointer[error]
}

var (
	_ state.Store     = (*Faulty)(nil)
	_ state.HotReader = (*Faulty)(nil)
	_ state.Queue     = (*Faulty)(nil)
)

// NewFaulty wraps s, which must also be a state.Queue (both backends are).
func NewFaulty(s state.Store) *Faulty {
	q, ok := s.(state.Queue)
	if !ok {
		panic(fmt.Sprintf("storetest: %T is not a state.Queue", s))
	}
	return &Faulty{Store: s, q: q}
}

// FailWrites makes every write fail with err from now on; nil restores
// normal writes.
func (f *Faulty) FailWrites(err error) {
	if err == nil {
		f.fail.Store(nil)
		return
	}
	f.fail.Store(&err)
}

// refused is the error of a write while FailWrites is in effect, nil
// otherwise.
func (f *Faulty) refused() error {
	if p := f.fail.Load(); p != nil {
		return fmt.Errorf("state: write refused: %w", *p)
	}
	return nil
}

// Create implements state.Store.
func (f *Faulty) Create(ctx context.Context, rec *state.Record) (*state.Record, bool, error) {
	if err := f.refused(); err != nil {
		return nil, false, err
	}
	return f.Store.Create(ctx, rec)
}

// Update implements state.Store.
func (f *Faulty) Update(ctx context.Context, k state.Key, fn func(*state.Record) error) (*state.Record, error) {
	if err := f.refused(); err != nil {
		return nil, err
	}
	return f.Store.Update(ctx, k, fn)
}

// Replace implements state.Store.
func (f *Faulty) Replace(ctx context.Context, old, rec *state.Record) error {
	if err := f.refused(); err != nil {
		return err
	}
	return f.Store.Replace(ctx, old, rec)
}

// GetHot implements state.HotReader when the wrapped store does (else it
// is Get without the history).
func (f *Faulty) GetHot(ctx context.Context, k state.Key) (*state.Record, error) {
	if h, ok := f.Store.(state.HotReader); ok {
		return h.GetHot(ctx, k)
	}
	r, err := f.Store.Get(ctx, k)
	if r != nil {
		r.History = nil
	}
	return r, err
}

// Enqueue implements state.Queue.
func (f *Faulty) Enqueue(ctx context.Context, e *state.QueueEntry) (uint64, bool, error) {
	if err := f.refused(); err != nil {
		return 0, false, err
	}
	return f.q.Enqueue(ctx, e)
}

// Ack implements state.Queue.
func (f *Faulty) Ack(ctx context.Context, queue string, seq uint64) error {
	if err := f.refused(); err != nil {
		return err
	}
	return f.q.Ack(ctx, queue, seq)
}

// List implements state.Queue.
func (f *Faulty) List(ctx context.Context, queue string, after uint64, limit int) ([]*state.QueueEntry, error) {
	return f.q.List(ctx, queue, after, limit)
}

// Depths implements state.Queue.
func (f *Faulty) Depths(ctx context.Context) (map[string]int, error) {
	return f.q.Depths(ctx)
}
