package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/internal/testkit"
	"github.com/smppproxy/smppproxy/state"
)

// unreadable is a store whose every record write finds the key's record
// undecodable.
type unreadable struct{ state.Store }

func (unreadable) Update(context.Context, state.Key, func(*state.Record) error) (*state.Record, error) {
	return nil, fmt.Errorf("decoding: %w", state.ErrCorrupt)
}

// A write retried in the background (an outcome the store refused) stops
// at the first attempt that finds the key's record unreadable: it is no
// record of this engine's, and every further attempt would fail alike.
// (The engine's clock stands still: without the stop it would retry until
// the engine closes.)
func TestBackgroundWriteStopsWhenTheRecordCannotBeRead(t *testing.T) {
	logs := testkit.NewLogLines()
	clk := testkit.NewClock(time.Now())
	e := newTestEngine(t, Config{Store: unreadable{state.NewMem(nil)}, Forwarder: &fakeForwarder{}, InstanceID: "test",
		Now: clk.Now, Logger: slog.New(logs)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.persistLater(slog.New(logs), state.Key{Account: "shop", Key: "k"}, func(*state.Record) error { return nil })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("persistLater still retrying a write over an unreadable record after 10 s")
	}
	if n, _ := logs.Count(msgUnreadable); n != 1 {
		t.Errorf("%d lines saying the record cannot be read; want 1", n)
	}
}
