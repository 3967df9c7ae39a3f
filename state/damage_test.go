package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/smppproxy/smppproxy/state"
)

// fillStore writes n records into a new store in dir and closes it: what
// a store looks like after a clean shutdown (Badger flushes its memtable
// into a table file on Close).
func fillStore(t *testing.T, dir string, n int) {
	t.Helper()
	s := openBadger(t, dir, nil)
	for i := range n {
		k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		if _, created, err := s.Create(context.Background(), record(k, time.Now())); err != nil || !created {
			t.Fatalf("Create(%v) = %v, %v; want created", k, created, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
}

func filesMatching(t *testing.T, dir, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func truncateHalf(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Half of what was written: a commit log segment made from a spare
	// ends with zeros it never used.
	used := len(bytes.TrimRight(b, "\x00"))
	if err := os.Truncate(path, int64(used/2)); err != nil {
		t.Fatal(err)
	}
}

// openDamaged opens dir, which must be refused as damaged: never a panic,
// never an empty store that looks healthy. It returns the error text.
func openDamaged(t *testing.T, dir string) string {
	t.Helper()
	var (
		s   *state.BadgerStore
		err error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("OpenBadger(damaged store) panicked: %v", p)
			}
		}()
		s, err = state.OpenBadger(state.BadgerOptions{Path: dir})
	}()
	if err == nil {
		n := 0
		_ = s.Scan(context.Background(), func(*state.Record) bool { n++; return true })
		s.Close()
		t.Fatalf("OpenBadger(damaged store) = nil error (store holds %d records), want ErrStoreDamaged", n)
	}
	if !errors.Is(err, state.ErrStoreDamaged) {
		t.Fatalf("OpenBadger(damaged store) = %v, want ErrStoreDamaged", err)
	}
	return err.Error()
}

// damages are the ways a store's files lose data.
var damages = map[string]func(t *testing.T, dir string){
	"missing MANIFEST": func(t *testing.T, dir string) {
		if err := os.Remove(filepath.Join(dir, "MANIFEST")); err != nil {
			t.Fatal(err)
		}
	},
	"truncated MANIFEST": func(t *testing.T, dir string) {
		truncateHalf(t, filepath.Join(dir, "MANIFEST"))
	},
	"truncated table": func(t *testing.T, dir string) {
		for _, f := range filesMatching(t, dir, "*.sst") {
			truncateHalf(t, f)
		}
	},
}

// A store whose data files lost their MANIFEST, had it cut short, or had
// a table file cut short is refused with ErrStoreDamaged: Badger would
// otherwise delete the tables it no longer knows (or panic on the short
// one) and the proxy would start with an empty store, forwarding every
// retry again. The tables are left in place for a restore.
func TestBadgerRefusesAStoreThatLostData(t *testing.T) {
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fillStore(t, dir, 200)
			tables := filesMatching(t, dir, "*.sst")
			if len(tables) == 0 {
				t.Fatalf("no table file after Close: the test does not damage what it means to")
			}
			damage(t, dir)
			msg := openDamaged(t, dir)
			for _, want := range []string{"restore", "--force-empty-store"} {
				if !strings.Contains(strings.ToLower(msg), want) {
					t.Errorf("error %q does not say what to do (%q)", msg, want)
				}
			}
			for _, f := range tables {
				if _, err := os.Stat(f); err != nil {
					t.Errorf("table %s gone after the refused open: %v", filepath.Base(f), err)
				}
			}
			// Refused again: refusing changed nothing.
			openDamaged(t, dir)
		})
	}
}

// A directory that was a store (its marker file is there) but whose
// Badger files are gone opens empty: refused.
func TestBadgerRefusesAStoreWhoseDataFilesAreGone(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 10)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, e := range ents {
		if e.Name() == state.MarkerFile {
			kept++
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if kept != 1 {
		t.Fatalf("no marker file %s in the store directory", state.MarkerFile)
	}
	openDamaged(t, dir)
}

// A brand-new directory, missing or empty, opens and becomes a store
// (with its marker) without any flag.
func TestBadgerOpensABrandNewDirectory(t *testing.T) {
	for name, dir := range map[string]string{
		"missing": filepath.Join(t.TempDir(), "data"),
		"empty":   t.TempDir(),
	} {
		t.Run(name, func(t *testing.T) {
			fillStore(t, dir, 3)
			if _, err := os.Stat(filepath.Join(dir, state.MarkerFile)); err != nil {
				t.Errorf("no marker after the first open: %v", err)
			}
			s := openBadger(t, dir, nil)
			defer s.Close()
			if _, err := s.Get(context.Background(), state.Key{Account: "acme", Key: "k2"}); err != nil {
				t.Errorf("Get after reopen = %v", err)
			}
		})
	}
}

// ForceEmpty (serve --force-empty-store) lets the operator start a
// damaged store deliberately, whatever the damage (a cut-short table
// must not make Badger panic): the damaged files are moved aside, not
// deleted, a fresh marker is written, and the next plain start is not
// refused again.
func TestBadgerForceEmptyStartsADamagedStoreDeliberately(t *testing.T) {
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fillStore(t, dir, 50)
			before, err := os.ReadFile(filepath.Join(dir, state.MarkerFile))
			if err != nil {
				t.Fatal(err)
			}
			damage(t, dir)
			openDamaged(t, dir)

			var logs bytes.Buffer
			s, err := state.OpenBadger(state.BadgerOptions{Path: dir, ForceEmpty: true,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				t.Fatalf("OpenBadger(ForceEmpty) = %v", err)
			}
			k := state.Key{Account: "acme", Key: "after"}
			if _, _, err := s.Create(context.Background(), record(k, time.Now())); err != nil {
				t.Fatalf("Create after a forced start = %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "force") {
				t.Errorf("a forced start logged no warning; logs:\n%s", logs.String())
			}
			if moved := filesMatching(t, dir, "damaged-*/*.sst"); len(moved) == 0 {
				t.Errorf("no table kept aside in damaged-*/ after a forced start")
			}
			after, err := os.ReadFile(filepath.Join(dir, state.MarkerFile))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(before, after) {
				t.Errorf("marker unchanged by a forced start: %s", after)
			}
			s = openBadger(t, dir, nil)
			defer s.Close()
			if _, err := s.Get(context.Background(), k); err != nil {
				t.Errorf("Get(%v) after the forced start = %v", k, err)
			}
		})
	}
}

// crashEnv makes the test binary a child that writes records into a store
// and exits without closing it (as after kill -9).
const crashEnv = "STATE_TEST_CRASH_STORE"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		os.Exit(crashWriter(dir))
	}
	if dir := os.Getenv(killEnv); dir != "" {
		os.Exit(killWriter(dir))
	}
	os.Exit(m.Run())
}

// crashNoLogEnv makes the crash writer run without the commit log
// (BadgerOptions.NoCommitLog).
const crashNoLogEnv = "STATE_TEST_CRASH_NO_COMMIT_LOG"

// crashRotateEnv makes the crash writer rotate its commit log segments at
// this many bytes.
const crashRotateEnv = "STATE_TEST_CRASH_ROTATE"

func crashWriter(dir string) int {
	opts := state.BadgerOptions{Path: dir, CheckpointInterval: -1, NoCommitLog: os.Getenv(crashNoLogEnv) != ""}
	if n, err := strconv.ParseInt(os.Getenv(crashRotateEnv), 10, 64); err == nil {
		opts = state.WithCommitLogRotate(opts, n)
	}
	s, err := state.OpenBadger(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := range 300 {
		k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		if _, _, err := s.Create(context.Background(), record(k, time.Now())); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	return 0 // no Close, no checkpoint: the logs are all there is
}

// crash runs the crash writer on dir (with extra environment env).
func crash(t *testing.T, dir string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), crashEnv+"="+dir), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("crash writer: %v\n%s", err, out)
	}
}

// lastNonZero returns the offset after the last non-zero byte of path
// (Badger's logs are preallocated and zero-filled).
func lastNonZero(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(bytes.TrimRight(b, "\x00")))
}

// cutMemtableLogs cuts Badger's memtable logs in half: the unsynced
// tail an OS crash loses.
func cutMemtableLogs(t *testing.T, dir string) {
	t.Helper()
	logs := filesMatching(t, dir, "*.mem")
	if len(logs) == 0 {
		t.Fatalf("no memtable log after the crash")
	}
	for _, f := range logs {
		if end := lastNonZero(t, f); end > 0 {
			if err := os.Truncate(f, end/2); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// commitLogs returns the commit log segments of dir.
func commitLogs(t *testing.T, dir string) []string {
	t.Helper()
	segs := filesMatching(t, dir, "commit-*.log")
	if len(segs) == 0 {
		t.Fatalf("no commit log after the crash")
	}
	return segs
}

// assertLossReported: dir is refused saying how much was lost, and a
// forced start counts the lost commits in Stats and in the
// smppproxy_store_lost_commits metric.
func assertLossReported(t *testing.T, dir string) {
	t.Helper()
	msg := openDamaged(t, dir)
	if !strings.Contains(msg, "commits") {
		t.Errorf("error %q does not say how much was lost", msg)
	}
	s, err := state.OpenBadger(state.BadgerOptions{Path: dir, ForceEmpty: true})
	if err != nil {
		t.Fatalf("OpenBadger(ForceEmpty) = %v", err)
	}
	defer s.Close()
	if got := s.Stats().LostCommits; got == 0 {
		t.Errorf("Stats().LostCommits = 0 after a forced start over lost commits, want > 0")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(state.NewMetrics(s))
	if got := value(t, reg, "smppproxy_store_lost_commits"); got != float64(s.Stats().LostCommits) {
		t.Errorf("smppproxy_store_lost_commits = %v, want %d", got, s.Stats().LostCommits)
	}
}

// assertAllRecords: dir opens without a loss flagged and holds the 300
// records of the crash writer.
func assertAllRecords(t *testing.T, dir string) {
	t.Helper()
	s := openBadger(t, dir, nil)
	defer s.Close()
	for i := range 300 {
		k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		if _, err := s.Get(context.Background(), k); err != nil {
			t.Fatalf("Get(%v) after the crash = %v: an acknowledged write is lost", k, err)
		}
	}
	if got := s.Stats().LostCommits; got != 0 {
		t.Errorf("Stats().LostCommits = %d, want 0", got)
	}
}

// Without the commit log (NoCommitLog), records lost with the tail of
// Badger's write-ahead log after a crash are detected, even when the
// crash came before any periodic checkpoint of the marker file: the store
// refuses to open saying how many commits are missing (a record lost that
// way would let a retry be forwarded again), and a forced start counts
// them in Stats (the smppproxy_store_lost_commits metric).
func TestBadgerDetectsCommitsLostWithATruncatedWriteAheadLog(t *testing.T) {
	dir := t.TempDir()
	crash(t, dir, crashNoLogEnv+"=1")
	if segs := filesMatching(t, dir, "commit-*.log"); len(segs) > 0 {
		t.Fatalf("commit log %v written with NoCommitLog", segs)
	}
	cutMemtableLogs(t, dir)
	assertLossReported(t, dir)
}

// With the commit log, what Badger's unsynced write-ahead log loses in
// an OS crash is replayed from the commit log: every acknowledged write
// is there and no loss is reported.
func TestBadgerReplaysTheCommitLogOverATruncatedWriteAheadLog(t *testing.T) {
	dir := t.TempDir()
	crash(t, dir)
	commitLogs(t, dir)
	cutMemtableLogs(t, dir)
	assertAllRecords(t, dir)
	if segs := filesMatching(t, dir, "commit-*.log"); len(segs) != 0 {
		t.Errorf("commit log segments after a clean Close = %v, want none (Badger holds everything)", segs)
	}
}

// A store left by a crash with the commit log, opened without it
// (NoCommitLog, the way back): the log is still replayed, then removed.
func TestBadgerReplaysTheCommitLogWhenOpenedWithoutIt(t *testing.T) {
	dir := t.TempDir()
	crash(t, dir)
	commitLogs(t, dir)
	cutMemtableLogs(t, dir)
	s, err := state.OpenBadger(state.BadgerOptions{Path: dir, NoCommitLog: true})
	if err != nil {
		t.Fatalf("OpenBadger(NoCommitLog) = %v", err)
	}
	if segs := filesMatching(t, dir, "commit-*.log"); len(segs) != 0 {
		t.Errorf("commit log segments after an open without the log = %v, want none", segs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	assertAllRecords(t, dir)
}

// A commit log whose tail is torn (a crash in the middle of appending a
// batch, which was therefore never acknowledged) is cut at its last whole
// batch: the store opens with every acknowledged write.
func TestBadgerCutsATornCommitLogTail(t *testing.T) {
	for name, tail := range map[string][]byte{
		"half a header": {0, 0, 1},
		"short body":    {0, 0, 0, 40, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 1, 45},
		"bad checksum":  append([]byte{0, 0, 0, 10, 0xde, 0xad, 0xbe, 0xef}, make([]byte, 10)...),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			crash(t, dir)
			segs := commitLogs(t, dir)
			last := segs[len(segs)-1]
			f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(tail); err != nil {
				t.Fatal(err)
			}
			f.Close()
			cutMemtableLogs(t, dir)
			assertAllRecords(t, dir)
		})
	}
}

// A commit log of many segments, each made from a spare of zeros and
// left with some of them unused, over Badger's memtable logs cut by an OS
// crash: every segment replays (the zeros are not damage) and every
// acknowledged write is there.
func TestBadgerReplaysACommitLogOfManyPreallocatedSegments(t *testing.T) {
	dir := t.TempDir()
	crash(t, dir, crashRotateEnv+"=4096")
	if segs := commitLogs(t, dir); len(segs) < 3 {
		t.Fatalf("commit log segments %v after 300 commits with 4 KiB segments, want several", segs)
	}
	cutMemtableLogs(t, dir)
	assertAllRecords(t, dir)
}

// A commit log cut inside an acknowledged batch, over a Badger
// write-ahead log that lost it too, is a loss: reported as before.
func TestBadgerDetectsCommitsLostWithACutCommitLog(t *testing.T) {
	dir := t.TempDir()
	crash(t, dir)
	segs := commitLogs(t, dir)
	truncateHalf(t, segs[len(segs)-1])
	cutMemtableLogs(t, dir)
	assertLossReported(t, dir)
}

// A commit log lost entirely, with the unsynced tail of Badger's
// write-ahead log lost too: the marker/high-water-mark check reports the
// loss as before.
func TestBadgerDetectsCommitsLostWithTheCommitLogGone(t *testing.T) {
	dir := t.TempDir()
	crash(t, dir)
	for _, f := range commitLogs(t, dir) {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	cutMemtableLogs(t, dir)
	assertLossReported(t, dir)
}

// A crash without damage loses nothing: the store opens without a flag.
func TestBadgerOpensAfterACrashThatLostNothing(t *testing.T) {
	dir := t.TempDir()
	crash(t, dir)
	s := openBadger(t, dir, nil)
	defer s.Close()
	if _, err := s.Get(context.Background(), state.Key{Account: "acme", Key: "k299"}); err != nil {
		t.Errorf("Get(last record) after a crash = %v", err)
	}
	if got := s.Stats().LostCommits; got != 0 {
		t.Errorf("Stats().LostCommits = %d, want 0", got)
	}
}

// A store written before markers existed (data, no marker) is adopted:
// it opens, a marker is written and a warning says so.
func TestBadgerAdoptsAStoreFromBeforeMarkers(t *testing.T) {
	dir := t.TempDir()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("x/qseq"), []byte{0, 0, 0, 0, 0, 0, 0, 7}) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := state.OpenBadger(state.BadgerOptions{Path: dir, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("OpenBadger(store without marker) = %v", err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, state.MarkerFile)); err != nil {
		t.Errorf("no marker written: %v", err)
	}
	if !strings.Contains(logs.String(), "no marker") {
		t.Errorf("adopting a store without marker logged no warning; logs:\n%s", logs.String())
	}
	s = openBadger(t, dir, nil)
	s.Close()
}

// A store directory in use by another process is reported as in use,
// never as damaged by the work that process is doing (here a table a
// compaction is writing, not yet in the MANIFEST).
func TestBadgerReportsAStoreInUseNotDamaged(t *testing.T) {
	dir := t.TempDir()
	s := openBadger(t, dir, nil)
	defer s.Close()
	if err := os.WriteFile(filepath.Join(dir, "999999.sst"), []byte("being written"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := state.OpenBadger(state.BadgerOptions{Path: dir})
	if err == nil {
		s2.Close()
		t.Fatalf("OpenBadger(directory in use) = nil error")
	}
	if errors.Is(err, state.ErrStoreDamaged) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("OpenBadger(directory in use) = %v, want an error saying it is in use", err)
	}
}

// A table its MANIFEST does not list (what a crash during a compaction
// leaves, and also what a MANIFEST cut short at an entry boundary
// leaves) is refused; a forced start moves only that table aside and
// keeps every record the MANIFEST's tables hold.
func TestBadgerForceEmptyKeepsTheListedTablesWhenOnlyAnUnlistedOneIsThere(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir, 30)
	if err := os.WriteFile(filepath.Join(dir, "999999.sst"), []byte("half a compaction"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := openDamaged(t, dir); !strings.Contains(msg, "999999.sst is not listed") {
		t.Errorf("error %q does not name the unlisted table", msg)
	}
	s, err := state.OpenBadger(state.BadgerOptions{Path: dir, ForceEmpty: true})
	if err != nil {
		t.Fatalf("OpenBadger(ForceEmpty) = %v", err)
	}
	defer s.Close()
	for i := range 30 {
		k := state.Key{Account: "acme", Key: fmt.Sprintf("k%d", i)}
		if _, err := s.Get(context.Background(), k); err != nil {
			t.Fatalf("Get(%v) after a forced start over an unlisted table = %v", k, err)
		}
	}
	if moved := filesMatching(t, dir, "damaged-*/999999.sst"); len(moved) != 1 {
		t.Errorf("the unlisted table was not kept aside in damaged-*/")
	}
}
