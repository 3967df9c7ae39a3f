package pgstore

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// The database counts the live records by state, over at most the limit,
// and says when it left some out: the metrics of records by state then
// cost neither the proxy nor the network a record each.
func TestCountStatesCountsTheLiveRecordsByStateUpToTheLimit(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	want := map[state.SubmitState]int{state.Accepted: 3, state.Unknown: 2, state.Sent: 1}
	i := 0
	for st, n := range want {
		for range n {
			i++
			r := sentRecord(c.Now(), fmt.Sprint("k", i), "test-1/1", uint32(i))
			r.State = st
			mustCreate(t, s, r)
		}
	}
	gone := sentRecord(c.Now(), "gone", "test-1/1", 99)
	gone.State, gone.Expires = state.Accepted, c.Now().Add(time.Minute)
	mustCreate(t, s, gone)
	c.Advance(time.Minute) // gone has expired

	for _, limit := range []int{100, 6} {
		got, complete, err := s.CountStates(bg, limit)
		if err != nil || !complete || !maps.Equal(got, want) {
			t.Errorf("CountStates(%d) = %v, %v, %v; want %v, complete (the expired record left out)", limit, got, complete, err, want)
		}
	}
	got, complete, err := s.CountStates(bg, 4)
	sum := 0
	for _, n := range got {
		sum += n
	}
	if err != nil || complete || sum != 4 {
		t.Errorf("CountStates(4) over 6 live records = %v, %v, %v; want 4 of them counted, not complete", got, complete, err)
	}
	for st, n := range got {
		if n > want[st] {
			t.Errorf("CountStates(4) counted %d %s records; there are %d", n, st, want[st])
		}
	}
}
