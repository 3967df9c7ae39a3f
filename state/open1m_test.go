package state

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"
)

// Start-up and memory with a million records. BenchmarkBadgerOpen1M
// builds a store of openN records (direct Badger batches, the keys and
// values BadgerStore writes: record, proxy id and message indexes, two
// history events; one in 1000 left Sent) and then opens it in
// a child process (TestBadgerOpenChild), which reports the open time, the
// time to visit the Sent records (ScanState, what recovery does), and its
// peak RSS (VmHWM) after opening, scanning and 50 000 submits (Create, Replace) on top, 256 at a time.
//
//	go test -run XXX -bench BadgerOpen1M -benchtime 1x ./state/
//
// STATE_OPEN_N overrides the number of records; STATE_OPEN_STORE names a
// directory to build the store in once and reuse (it is opened and
// written to by each run). Options of the child: STATE_OPEN_OPTS, e.g.
// "memtable=8 memtables=2 block=8 index=4" (MiB).

func BenchmarkBadgerOpen1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("STATE_OPEN_N")); err == nil {
		n = v
	}
	dir := os.Getenv("STATE_OPEN_STORE") // reuse (or build there once)
	if dir == "" {
		dir = b.TempDir()
	}
	if _, err := os.Stat(filepath.Join(dir, MarkerFile)); err != nil {
		t0 := time.Now()
		buildStore(b, dir, n)
		b.Logf("built %d records in %v", n, time.Since(t0))
	}
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBadgerOpenChild$", "-test.v")
		cmd.Env = append(os.Environ(), "STATE_OPEN_DIR="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "after ") {
				b.Log(line)
			}
			var what string
			var v float64
			if _, err := fmt.Sscanf(line, "open1m: %s %g", &what, &v); err == nil {
				b.ReportMetric(v, what)
			}
		}
	}
}

// buildStore writes n records the way BadgerStore stores them, fast (a
// Badger StreamWriter: sorted tables written directly, one stream per key
// prefix), then opens and closes the store once (its marker).
func buildStore(b *testing.B, dir string, n int) {
	opts := BadgerOptions{Path: dir}
	opts.setDefaults()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithSyncWrites(false).
		WithMemTableSize(opts.MemtableSize).WithValueThreshold(opts.ValueThreshold))
	if err != nil {
		b.Fatal(err)
	}
	sw := db.NewStreamWriter()
	if err := sw.Prepare(); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	c := clock{now: now, wall: now}
	buf := z.NewBuffer(64<<20, "build")
	flush := func() {
		if err := sw.Write(buf); err != nil {
			b.Fatal(err)
		}
		buf.Release()
		buf = z.NewBuffer(64<<20, "build")
	}
	streams := map[byte]uint32{'h': 1, 'm': 2, 'p': 3, 'r': 4, 's': 5, 'x': 6}
	put := func(key, val []byte, exp uint64) {
		badger.KVToBuffer(&pb.KV{Key: key, Value: val, Version: 1, ExpiresAt: exp, StreamId: streams[key[0]]}, buf)
	}
	for i := range n {
		r := openRecord(i, now)
		ws, _ := plan(recordKey(r.Key), nil, 0, r, true, c)
		for _, w := range ws {
			put(w.key, w.val, w.expiresAt)
		}
		if buf.LenNoPadding() > 32<<20 {
			flush()
		}
	}
	put([]byte(keySentIndex), []byte{1}, 0)
	flush()
	buf.Release()
	if err := sw.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	s, err := OpenBadger(BadgerOptions{Path: dir, GCInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

// openRecord is record i of the store buildStore makes; keys (and index
// keys) grow with i, as the stream writer needs.
func openRecord(i int, now time.Time) *Record {
	r := &Record{
		Key: Key{Account: "acme", Key: fmt.Sprintf("otp-%016x", i)}, FingerprintVersion: FingerprintHMAC,
		State: Accepted, Owner: "proxy-1/" + strconv.Itoa(i), Attempts: 1,
		Upstream: "smsc-a", Session: "smsc-a/1", Sequence: uint32(i), MessageID: fmt.Sprintf("%012x", i),
		ProxyID: fmt.Sprintf("p-%016x", i), Created: now, Updated: now, Expires: now.Add(72 * time.Hour),
		History: []Event{
			{At: now, State: Sent, Session: "smsc-a/1", Sequence: uint32(i), Note: "created"},
			{At: now, State: Accepted, MessageID: "x", Note: "submit_sm_resp from smsc-a: accepted"},
		},
	}
	r.Fingerprint = sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
	r.AddrHash = HashAddrs([]byte("SHOP"), r.Fingerprint[:8])
	if i%1000 == 0 {
		r.State, r.MessageID = Sent, ""
		r.History = r.History[:1]
	}
	return r
}

// TestBadgerOpenChild is the child of BenchmarkBadgerOpen1M.
func TestBadgerOpenChild(t *testing.T) {
	dir := os.Getenv("STATE_OPEN_DIR")
	if dir == "" {
		t.Skip("run by BenchmarkBadgerOpen1M")
	}
	opts := BadgerOptions{Path: dir, GCInterval: -1}
	for _, f := range strings.Fields(os.Getenv("STATE_OPEN_OPTS")) {
		k, v, _ := strings.Cut(f, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "memtable":
			opts.MemtableSize = n << 20
		case "memtables":
			opts.NumMemtables = int(n)
		case "block":
			opts.BlockCacheSize = n << 20
		case "index":
			opts.IndexCacheSize = n << 20
		}
	}
	t0 := time.Now()
	s, err := OpenBadger(opts)
	if err != nil {
		t.Fatal(err)
	}
	open := time.Since(t0)
	fmt.Println("after open:", memStatus())
	t0 = time.Now()
	sent := 0
	if err := s.ScanState(context.Background(), Sent, func(*Record) bool { sent++; return true }); err != nil {
		t.Fatal(err)
	}
	scan := time.Since(t0)
	hwmOpen := vmHWM()
	fmt.Println("after scan:", memStatus())
	ctx := context.Background()
	run := time.Now().UnixNano()
	var wg sync.WaitGroup
	for i := range 50_000 {
		if i%100 == 0 {
			if _, err := s.Get(ctx, Key{Account: "acme", Key: fmt.Sprintf("otp-%016x", i*37)}); err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() { // a submit: created, then its outcome
			defer wg.Done()
			r := openRecord(i, time.Now())
			r.Key.Key = fmt.Sprintf("new-%x-%d", run, i)
			r.State, r.MessageID, r.History = Sent, "", r.History[:1]
			if _, _, err := s.Create(ctx, r); err != nil {
				t.Error(err)
				return
			}
			out := r.Clone()
			out.State, out.MessageID = Accepted, fmt.Sprintf("n-%x-%d", run, i)
			out.History = append(out.History, Event{At: time.Now(), State: Accepted, MessageID: out.MessageID})
			if err := s.Replace(ctx, r, out); err != nil {
				t.Error(err)
			}
		}()
		if i%256 == 255 {
			wg.Wait()
		}
	}
	wg.Wait()
	fmt.Println("after writes:", memStatus())
	if p := os.Getenv("STATE_OPEN_HEAP"); p != "" {
		if f, err := os.Create(p); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("open1m: open-s %g\nopen1m: scan-sent-s %g\nopen1m: sent-records %d\nopen1m: rss-open-MB %d\nopen1m: rss-peak-MB %d\n",
		open.Seconds(), scan.Seconds(), sent, hwmOpen>>20, vmHWM()>>20)
}

// memStatus describes the process's memory: resident (anonymous and
// file-backed) and the Go heap.
func memStatus() string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, _ := os.ReadFile("/proc/self/status")
	var out []string
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "VmRSS") || strings.HasPrefix(line, "RssAnon") || strings.HasPrefix(line, "RssFile") || strings.HasPrefix(line, "VmHWM") {
			out = append(out, strings.Join(strings.Fields(line), " "))
		}
	}
	return fmt.Sprintf("%s; Go heap in use %d MiB, sys %d MiB", strings.Join(out, ", "), ms.HeapInuse>>20, ms.Sys>>20)
}

// vmHWM is the process's peak resident set size in bytes.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
