package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A batch bigger than one Badger transaction is split; every request still
// gets its true outcome.
func TestBadgerSplitsTooBigBatch(t *testing.T) {
	s, err := OpenBadger(BadgerOptions{
		Path:           t.TempDir(),
		MaxBatch:       512,
		GCInterval:     -1,
		unlimitedBatch: true,
		tune: func(o badger.Options) badger.Options {
			// ~150 KiB per transaction.
			return o.WithMemTableSize(1 << 20).WithValueThreshold(64 << 10)
		},
	})
	if err != nil {
		t.Fatalf("OpenBadger = %v", err)
	}
	defer s.Close()

	now := time.Now()
	note := strings.Repeat("n", 1024)
	rec := func(i int, owner string) *Record {
		return &Record{
			Key: Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}, State: Sent, Owner: owner,
			Upstream: "smsc", Session: "smsc/1", Sequence: uint32(i), MessageID: fmt.Sprintf("m%d", i),
			Created: now, Updated: now, Expires: now.Add(time.Hour),
			History: []Event{{At: now, State: Sent, Note: note}},
		}
	}
	const n = 400
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, created, err := s.Create(ctx, rec(i, "first")); err != nil || !created {
				t.Errorf("Create(k%d) = %v, %v; want created", i, created, err)
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("%d requests in %d commits", st.Ops, st.Commits)
	if st.Commits < 2 || st.Failed != 0 {
		t.Errorf("Stats() = %+v after %d creates of ~1 KiB records; want ≥ 2 commits", st, n)
	}
	if dup, created, err := s.Create(ctx, rec(0, "second")); err != nil || created || dup.Owner != "first" {
		t.Errorf("Create(k0) again = %+v, %v, %v; want the first owner's record", dup, created, err)
	}
	for i := range n {
		k := Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		if got, err := s.Get(ctx, k); err != nil || got.Owner != "first" || got.Session != "smsc/1" || got.Sequence != uint32(i) {
			t.Errorf("Get(%v) = %+v, %v; want owner first, journaled on smsc/1 with sequence %d", k, got, err, i)
		}
	}
}

// Badger's TTL follows the store's clock offset, not the absolute Expires:
// an injected clock years away from real time must not make Badger drop
// (or keep forever) a record.
func TestBadgerTTLFromStoreClock(t *testing.T) {
	wall := time.Now()
	for _, now := range []time.Time{wall.AddDate(-5, 0, 0), wall, wall.AddDate(5, 0, 0)} {
		st := stager{now: now, wall: wall}
		got := int64(st.expiresAt(now.Add(time.Hour)))
		want := wall.Add(time.Hour).Unix()
		if got < want || got > want+2 {
			t.Errorf("expiresAt(now+1h) with clock %v = %d, want %d..%d", now, got, want, want+2)
		}
	}
	if got := (&stager{now: wall, wall: wall}).expiresAt(time.Time{}); got != 0 {
		t.Errorf("expiresAt(zero) = %d, want 0 (no TTL)", got)
	}
}

// A nearly full disk refuses writes with ErrDiskFull (instead of letting
// Badger fault on a memory-mapped page); reads go on, and writes resume
// once space is back.
func TestBadgerDiskFullGuard(t *testing.T) {
	// The free space read for every batch: the drop below is seen at once.
	s, free := openOnDisk(t, 512<<20, 1<<30, -1)
	ctx := context.Background()
	now := time.Now()
	rec := func(k string) *Record {
		return &Record{Key: Key{Account: "a", Key: k}, State: Sent, Created: now, Expires: now.Add(time.Hour)}
	}
	if _, created, err := s.Create(ctx, rec("before")); err != nil || !created {
		t.Fatalf("Create(before) = %v, %v; want created", created, err)
	}

	free.Store(100 << 20)
	if _, created, err := s.Create(ctx, rec("during")); !errors.Is(err, ErrDiskFull) || created {
		t.Errorf("Create(during) with 100 MiB free = %v, %v; want ErrDiskFull", created, err)
	}
	if _, err := s.Update(ctx, rec("before").Key, func(r *Record) error { r.Owner = "x"; return nil }); !errors.Is(err, ErrDiskFull) {
		t.Errorf("Update(before) with 100 MiB free = %v; want ErrDiskFull", err)
	}
	if got, err := s.Get(ctx, rec("before").Key); err != nil || got.Owner != "" {
		t.Errorf("Get(before) with 100 MiB free = %+v, %v; want the unchanged record", got, err)
	}
	if f := s.Stats().Failed; f != 2 {
		t.Errorf("Stats().Failed = %d after two refused writes, want 2 (smppproxy_store_failed_writes_total)", f)
	}

	free.Store(600 << 20)
	if _, created, err := s.Create(ctx, rec("during")); err != nil || !created {
		t.Errorf("Create(during) once space is back = %v, %v; want created", created, err)
	}
}

// Far from the limit, free space is read once per diskCheckEvery, not
// for every batch (a statfs each); it is read again as soon as the
// batches since could have used up a share of the room above the limit,
// and a disk found low is read for every batch until space is back.
func TestBadgerDiskFreeIsReadWhenTheRoomMayHaveGone(t *testing.T) {
	const min = 512 << 20
	open := func(initial uint64) (s *BadgerStore, free, reads *atomic.Uint64, create func() error) {
		free, reads = new(atomic.Uint64), new(atomic.Uint64)
		free.Store(initial)
		s, err := OpenBadger(BadgerOptions{
			Path:           t.TempDir(),
			MinFreeBytes:   min,
			diskFree:       func(string) (uint64, bool) { reads.Add(1); return free.Load(), true },
			diskCheckEvery: time.Hour,
		})
		if err != nil {
			t.Fatalf("OpenBadger = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		now, n := time.Now(), 0
		create = func() error {
			n++
			_, _, err := s.Create(context.Background(), &Record{Key: Key{Account: "a", Key: fmt.Sprint("k", n)}, State: Sent, Created: now, Expires: now.Add(time.Hour)})
			return err
		}
		return s, free, reads, create
	}

	_, _, reads, create := open(1 << 40)
	for range 50 {
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}
	if r := reads.Load(); r != 1 {
		t.Errorf("free space read %d times for 50 writes with 1 TiB free; want once", r)
	}

	// 16 KiB above the limit: the room for batches before the next
	// reading is 1/64 of that, which a few writes use up.
	_, free, reads, create := open(min + 16<<10)
	for i := 0; reads.Load() < 2; i++ {
		if i == 50 {
			t.Fatalf("free space read %d times in 50 writes with 16 KiB of room; want it read again as the room goes", reads.Load())
		}
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}
	free.Store(min - 1)
	refused := 0
	for range 8 {
		if err := create(); errors.Is(err, ErrDiskFull) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	// The room left by the last reading (256 bytes) takes at most one
	// write; the disk is then read for every batch.
	if refused < 7 {
		t.Errorf("%d of 8 writes refused with the disk below the limit; want at least 7", refused)
	}
	free.Store(1 << 40)
	if err := create(); err != nil {
		t.Errorf("Create once space is back = %v; want it accepted (a low disk is read for every batch)", err)
	}
}

// Badger's warnings, and its notes about data files it deletes or
// truncates (which Badger logs below warning level), reach the log at
// WARN; its other chatter stays at DEBUG.
func TestBadgerWarningsAreLoggedAtWarn(t *testing.T) {
	var buf bytes.Buffer
	l := badgerLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	l.Warningf("a warning %d", 1)
	l.Debugf("Table file %d not referenced in MANIFEST\n", 7)
	l.Infof("Replay took: %s", "1ms")
	out := buf.String()
	for _, want := range []string{`level=WARN msg="badger: a warning 1"`, `level=WARN msg="badger: Table file 7 not referenced in MANIFEST"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s; got:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Replay took") {
		t.Errorf("Badger's chatter logged at WARN:\n%s", out)
	}
}
