package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

func openBadger(t *testing.T, dir string, now func() time.Time) *state.BadgerStore {
	t.Helper()
	s, err := state.OpenBadger(state.BadgerOptions{Path: dir, Now: now})
	if err != nil {
		t.Fatalf("OpenBadger(%q) = %v", dir, err)
	}
	return s
}

func TestBadgerStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) state.Store {
		s := openBadger(t, t.TempDir(), now)
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestBadgerOpenNeedsPath(t *testing.T) {
	if s, err := state.OpenBadger(state.BadgerOptions{}); err == nil {
		s.Close()
		t.Errorf("OpenBadger(no Path) = nil error, want an error")
	}
}

func record(k state.Key, now time.Time) *state.Record {
	return &state.Record{
		Key: k, State: state.Sent, Owner: "owner-" + k.Key,
		Created: now, Updated: now, Expires: now.Add(72 * time.Hour),
	}
}

// Everything a call reported written is there after a restart, indexes
// included.
func TestBadgerDurableAcrossReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openBadger(t, dir, nil)
	const n = 50
	for i := range n {
		k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		if _, created, err := s.Create(ctx, record(k, time.Now())); err != nil || !created {
			t.Fatalf("Create(%v) = %v, %v; want created", k, created, err)
		}
		if i%2 == 0 {
			_, err := s.Update(ctx, k, func(r *state.Record) error {
				r.State, r.Upstream, r.MessageID, r.Session, r.Sequence = state.Accepted, "smsc", fmt.Sprintf("m%d", i), "smsc/1", uint32(i)
				return nil
			})
			if err != nil {
				t.Fatalf("Update(%v) = %v", k, err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}

	s = openBadger(t, dir, nil)
	defer s.Close()
	for i := range n {
		k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		got, err := s.Get(ctx, k)
		if err != nil || got.Owner != "owner-"+k.Key {
			t.Errorf("after reopen Get(%v) = %+v, %v; want owner-%s", k, got, err, k.Key)
			continue
		}
		if i%2 != 0 {
			continue
		}
		if got.Upstream != "smsc" || got.Session != "smsc/1" || got.Sequence != uint32(i) {
			t.Errorf("after reopen Get(%v) journaled on %q %q #%d; want smsc smsc/1 #%d", k, got.Upstream, got.Session, got.Sequence, i)
		}
		if got, err := s.ByMessageID(ctx, "smsc", fmt.Sprintf("m%d", i)); err != nil || got.Key != k {
			t.Errorf("after reopen ByMessageID(smsc, m%d) = %+v, %v; want %v", i, got, err, k)
		}
	}
}

// Concurrent writers share commits: that is the whole point of the
// committer.
func TestBadgerGroupCommit(t *testing.T) {
	s := openBadger(t, t.TempDir(), nil)
	defer s.Close()
	const n = 1000
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
			<-start
			if _, created, err := s.Create(context.Background(), record(k, time.Now())); err != nil || !created {
				t.Errorf("Create(%v) = %v, %v; want created", k, created, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	st := s.Stats()
	t.Logf("%d creates in %d commits (%.1f per fsync)", st.Ops, st.Commits, float64(st.Ops)/float64(st.Commits))
	if st.Ops != n || st.Commits >= st.Ops || st.Failed != 0 {
		t.Errorf("Stats() = %+v after %d concurrent creates; want Ops %d, Commits < Ops, Failed 0", st, n, n)
	}
}

// Close lets every enqueued write finish: each Create racing Close either
// succeeded (and survives a restart) or got ErrClosed (and wrote nothing).
func TestBadgerCloseDrains(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openBadger(t, dir, nil)
	const n = 300
	var (
		wg      sync.WaitGroup
		results [n]error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
			_, _, results[i] = s.Create(ctx, record(k, time.Now()))
		}()
		if i == n/2 {
			wg.Add(1)
			go func() { defer wg.Done(); s.Close() }()
		}
	}
	wg.Wait()
	s.Close()

	s = openBadger(t, dir, nil)
	defer s.Close()
	var ok, closed int
	for i, err := range results {
		k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		_, gerr := s.Get(ctx, k)
		switch {
		case err == nil:
			ok++
			if gerr != nil {
				t.Errorf("Create(%v) = nil before Close, but after reopen Get = %v", k, gerr)
			}
		case errors.Is(err, state.ErrClosed):
			closed++
			if !errors.Is(gerr, state.ErrNotFound) {
				t.Errorf("Create(%v) = ErrClosed, but after reopen Get = %v; want ErrNotFound", k, gerr)
			}
		default:
			t.Errorf("Create(%v) racing Close = %v; want nil or ErrClosed", k, err)
		}
	}
	t.Logf("%d creates done, %d refused by Close", ok, closed)
}

// Badger's informational chatter must not reach an info-level log.
func TestBadgerLogsQuietly(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := state.OpenBadger(state.BadgerOptions{Path: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatalf("OpenBadger = %v", err)
	}
	if _, _, err := s.Create(context.Background(), record(state.Key{Account: "a", Key: "k"}, time.Now())); err != nil {
		t.Fatalf("Create = %v", err)
	}
	s.Close()
	if buf.Len() != 0 {
		t.Errorf("open, create, close logged at info level:\n%s\nwant nothing", buf.String())
	}
}

func TestBadgerInMemory(t *testing.T) {
	s, err := state.OpenBadger(state.BadgerOptions{InMemory: true})
	if err != nil {
		t.Fatalf("OpenBadger(InMemory) = %v", err)
	}
	defer s.Close()
	k := state.Key{Account: "a", Key: "k"}
	if _, created, err := s.Create(context.Background(), record(k, time.Now())); err != nil || !created {
		t.Fatalf("Create(%v) = %v, %v; want created", k, created, err)
	}
	if _, err := s.Get(context.Background(), k); err != nil {
		t.Errorf("Get(%v) = %v", k, err)
	}
}

// Close stops every goroutine the store started (and Badger's own).
func TestBadgerCloseLeaksNoGoroutines(t *testing.T) {
	before := testkit.CountGoroutines()
	s := openBadger(t, t.TempDir(), nil)
	if _, _, err := s.Create(context.Background(), record(state.Key{Account: "a", Key: "k"}, time.Now())); err != nil {
		t.Fatalf("Create = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	// Exiting goroutines may take a moment to be unscheduled.
	before.Check(t, 5*time.Second, 0)
}
