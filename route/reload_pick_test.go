package route

import (
	"context"
	"fmt"
	"testing"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

// A backup (weight 0) takes submits only while no weighted upstream of
// the route is up: not the retry of a temporary error that the one
// weighted upstream, still up, answered.
func TestATemporaryErrorIsRetriedOnTheWeightedUpstreamNotTheBackup(t *testing.T) {
	primary := &fakeUp{name: "primary", up: 1, status: func(n int) smpp.Status {
		if n == 1 {
			return smpp.StatusThrottled
		}
		return smpp.StatusOK
	}}
	backup := &fakeUp{name: "backup", up: 1}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: primary, Weight: 1, Attempts: 3}, {Upstream: backup, Weight: 0}}}, Sleep: noSleep})
	var j []string
	res := r.Forward(context.Background(), attempt(t, &j))
	if backup.calls != 0 || res.Kind != dedup.Answered || res.Status != smpp.StatusOK || res.Upstream != "primary" {
		t.Errorf("Forward = %v %v via %s (journal %v), backup called %d times; want accepted by primary on its retry, the backup never", res.Kind, res.Status, res.Upstream, j, backup.calls)
	}
}

// closedFirst is an upstream whose first submits find its pool closed (a
// reload replaced it) before anything was written.
type closedFirst struct {
	fakeUp
	closed int
}

func (c *closedFirst) Submit(ctx context.Context, prefer string, build func(uint32) []byte, before func(string, uint32) error) (smppclient.Response, error) {
	c.mu.Lock()
	if c.closed > 0 {
		c.closed--
		c.mu.Unlock()
		return smppclient.Response{}, fmt.Errorf("%w: %w", smppclient.ErrNotSent, smppclient.ErrClosed)
	}
	c.mu.Unlock()
	return c.fakeUp.Submit(ctx, prefer, build, before)
}

// A submit that found its upstream's pool closed (a reload replaced it;
// nothing was written) picks again from the routes in force, which name
// the new pool, instead of failing with 0x08; a pool that stays closed
// (the proxy shutting down) ends it after a few picks.
func TestASubmitThatFindsItsPoolClosedPicksAgain(t *testing.T) {
	up := &closedFirst{fakeUp: fakeUp{name: "smsc", up: 1}, closed: 1}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: up, Weight: 1}}}, Sleep: noSleep})
	var j []string
	if res := r.Forward(context.Background(), attempt(t, &j)); res.Kind != dedup.Answered || res.Status != smpp.StatusOK {
		t.Errorf("Forward after a closed pool = %v %v (%v), want accepted on the pick after it", res.Kind, res.Status, res.Err)
	}
	down := &closedFirst{fakeUp: fakeUp{name: "smsc", up: 1}, closed: 1000}
	r = New(Config{Routes: map[string][]Member{"shop": {{Upstream: down, Weight: 1}}}, Sleep: noSleep})
	if res := r.Forward(context.Background(), attempt(t, &j)); res.Kind != dedup.NotSent || down.closed < 1000-maxClosedPicks-1 {
		t.Errorf("Forward on a pool that stays closed = %v after %d picks, want not sent after at most %d", res.Kind, 1000-down.closed, maxClosedPicks+1)
	}
}
