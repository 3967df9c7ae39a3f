package pgstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// Reads of many keys at once are grouped into one statement: each caller
// still gets the record under its own key, ErrNotFound for a key that
// has none or whose record expired, and Update reads and writes its own.
func TestConcurrentReadsEachGetTheRecordOfTheirKey(t *testing.T) {
	t.Parallel()
	c := storetest.NewClock(t0)
	s := openTest(t, Options{Now: c.Now})
	const n = 300
	for i := range n {
		r := sentRecord(t0, fmt.Sprintf("k%d", i), "test-1/1", uint32(i))
		if i%3 == 2 {
			r.Expires = t0.Add(time.Second)
		}
		mustCreate(t, s, r)
	}
	c.Advance(2 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n + 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
			got, err := s.Get(bg, k)
			switch {
			case i >= n || i%3 == 2:
				if !errors.Is(err, state.ErrNotFound) {
					errs <- fmt.Errorf("Get(%v) = %v, %v; want ErrNotFound", k, got, err)
				}
			case err != nil || got.Key != k || got.Sequence != uint32(i):
				errs <- fmt.Errorf("Get(%v) = %+v, %v; want its own record", k, got, err)
			}
			if i%3 != 0 || i >= n {
				return
			}
			up, err := s.Update(bg, k, func(r *state.Record) error { r.Attempts = i; return nil })
			if err != nil || up.Key != k || up.Attempts != i {
				errs <- fmt.Errorf("Update(%v) = %+v, %v", k, up, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := 0; i < n; i += 3 {
		if r := mustGet(t, s, state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}); r.Attempts != i {
			t.Errorf("k%d: Attempts %d after its Update, want %d", i, r.Attempts, i)
		}
	}
}
