package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// A write whose key Badger would refuse (an upstream answered with a
// message id of tens of kilobytes: the message id index's key) fails
// alone, before the committer: in a group commit Badger's refusal failed
// every other request of the batch with it, other accounts' included
// (from review: 138–381 of 399 concurrent updates of another account
// failed), and its error carried the whole key in hex into the logs.
func TestAWriteWithAKeyBadgerRefusesFailsAloneNotItsBatch(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{Path: t.TempDir(), GCInterval: -1, CommitDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	const victims = 200
	for i := range victims + 1 {
		r := sentRecord(fmt.Sprint("k", i), now)
		if i == 0 {
			r.Key.Account = "hostile"
		}
		if _, _, err := s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	start := make(chan struct{})
	errs := make([]error, victims+1)
	var wg sync.WaitGroup
	for i := range victims + 1 {
		wg.Go(func() {
			<-start
			k := Key{Account: "acme", Key: fmt.Sprint("k", i)}
			huge := i == 0
			if huge {
				k.Account = "hostile"
			}
			_, errs[i] = s.Update(ctx, k, func(r *Record) error {
				r.State, r.MessageID = Accepted, fmt.Sprint("m", i)
				if huge {
					r.MessageID = strings.Repeat("A", 70000)
				}
				return nil
			})
		})
	}
	close(start)
	wg.Wait()
	if !errors.Is(errs[0], ErrKeyTooLong) || len(errs[0].Error()) > 200 {
		t.Errorf("update with a 70,000-byte message id: %.300v; want ErrKeyTooLong, without the key", errs[0])
	}
	failed := 0
	for _, err := range errs[1:] {
		if err != nil {
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d concurrent updates of another account failed with it; want none", failed, victims)
	}
	if _, dup, err := s.Enqueue(ctx, &QueueEntry{Queue: "shop", DedupKey: strings.Repeat("r", 70000), Expires: now.Add(time.Hour)}); !errors.Is(err, ErrKeyTooLong) || dup {
		t.Errorf("enqueue with a 70,000-byte dedup key: dup %v, %.300v; want ErrKeyTooLong", dup, err)
	}
	if _, _, err := s.Enqueue(ctx, &QueueEntry{Queue: "shop", DedupKey: "r-1", Expires: now.Add(time.Hour)}); err != nil {
		t.Errorf("enqueue after it: %v", err)
	}
}
