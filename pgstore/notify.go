package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/smppproxy/smppproxy/state"
)

var _ state.Notifier = (*Store)(nil)

// notifyChannel is the LISTEN/NOTIFY channel of the store's schema: every
// Enqueue notifies it, with the queue's name, when its transaction commits.
// PostgreSQL names are at most 63 bytes: a schema name too long to follow
// the prefix whole is replaced by a hash of it (the same for every
// instance), else NOTIFY failed and LISTEN truncated the name.
func (s *Store) notifyChannel() string {
	const prefix = "smppproxy_queue_"
	if len(prefix)+len(s.opts.Schema) <= 63 {
		return prefix + s.opts.Schema
	}
	h := sha256.Sum256([]byte(s.opts.Schema))
	return prefix + hex.EncodeToString(h[:16])
}

// listeners are the functions Subscribe registered.
type listeners struct {
	mu   sync.Mutex
	fns  []func(queue string)
	once sync.Once
}

// Subscribe implements state.Notifier: fn is called with a queue's name
// soon after any instance sharing the store enqueued into it (PostgreSQL
// LISTEN/NOTIFY over a connection of its own, reconnected with back-off).
// A notification can be lost while that connection is down: callers keep
// polling as a fallback.
func (s *Store) Subscribe(fn func(queue string)) {
	s.listen.mu.Lock()
	s.listen.fns = append(s.listen.fns, fn)
	s.listen.mu.Unlock()
	s.listen.once.Do(func() {
		s.maintenance.Add(1)
		go s.listenLoop()
	})
}

func (s *Store) notifyAll(queue string) {
	s.listen.mu.Lock()
	fns := slices.Clone(s.listen.fns)
	s.listen.mu.Unlock()
	for _, fn := range fns {
		fn(queue)
	}
}

// listenLoop holds a connection that LISTENs on the channel until Close.
func (s *Store) listenLoop() {
	defer s.maintenance.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		if err := s.listenOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("queue notifications interrupted; polling until they are back", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
			delay = min(2*delay, 10*time.Second)
			continue
		}
		delay = 100 * time.Millisecond
	}
}

func (s *Store) listenOnce(ctx context.Context) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{s.notifyChannel()}.Sanitize()); err != nil {
		return err
	}
	for {
		n, err := c.Conn().WaitForNotification(ctx)
		if err != nil {
			// The connection may be in the middle of something: do not
			// give it back to the pool.
			_ = c.Conn().Close(context.Background())
			return err
		}
		if q, err := hex.DecodeString(n.Payload); err == nil {
			s.notifyAll(string(q))
		}
	}
}
