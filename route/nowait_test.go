package route

import (
	"context"
	"fmt"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smppclient"
)

// throttleOnceUp answers its first submit 0x58 (after the journal) and
// the later ones 0; a submit made without waiting after the first is
// turned away busy (its binds paused by the 0x58), as smppclient does.
type throttleOnceUp struct {
	fakeUp
	noWaitLater bool // a submit after the first was made without waiting
}

func (f *throttleOnceUp) Submit(ctx context.Context, _ string, build func(uint32) []byte, before func(string, uint32) error) (smppclient.Response, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	if n > 1 && smppclient.NoWait(ctx) {
		f.noWaitLater = true
		return smppclient.Response{}, fmt.Errorf("%w: %w", smppclient.ErrNotSent, smppclient.ErrBusy)
	}
	if err := before("a/s", uint32(n)); err != nil {
		return smppclient.Response{}, err
	}
	st := smpp.StatusOK
	if n == 1 {
		st = smpp.StatusThrottled
	}
	return smppclient.Response{Status: st, MessageID: "id", Session: "a/s", Sequence: uint32(n)}, nil
}

// A submit forwarded without waiting (its key not read first) whose key
// was journaled and then answered with a temporary error is retried in the
// proxy waiting for capacity like any other: NoWait only covers the tries
// before the key's create.
func TestARetryAfterTheJournalWaitsForCapacity(t *testing.T) {
	up := &throttleOnceUp{fakeUp: fakeUp{name: "a", up: 1}}
	r := New(Config{Routes: map[string][]Member{"shop": {{Upstream: up, Weight: 1, Attempts: 3}}}, Sleep: noSleep})
	var j []string
	att := attempt(t, &j)
	att.NoWait = true
	res := r.Forward(context.Background(), att)
	if up.noWaitLater {
		t.Errorf("the retry of a journaled submit was made without waiting for capacity")
	}
	if res.Status != smpp.StatusOK {
		t.Errorf("result = %v %v, want accepted by the retry", res.Kind, res.Status)
	}
}
