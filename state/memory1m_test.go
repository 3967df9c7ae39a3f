package state

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Memory while a store fills. BenchmarkBadgerMemory1M writes memN
// submit-shaped record pairs (a Create in state Sent, then a Replace with
// the outcome, as the proxy writes a fresh submit) through a BadgerStore
// with the default options, from 400 writers (the bench's 4 binds ×
// window 100), in a child process (TestBadgerMemoryChild) that reports
// its peak RSS (VmHWM), the peaks of its anonymous and file-backed RSS and
// of the Go heap (sampled every 50 ms), the submits per second, and then
// the reads per second of half of the records (spread over all of them).
//
//	go test -run XXX -bench BadgerMemory1M -benchtime 1x ./state/
//
// STATE_MEM_N overrides the number of submits; STATE_MEM_OPTS replaces
// options of the child, e.g. "memtable=4 basetable=1 compression=snappy"
// (sizes in MiB; see memTune), to compare settings A/B; STATE_MEM_HEAP
// names a file for the heap profile taken once the writes are done.

func BenchmarkBadgerMemory1M(b *testing.B) {
	for range b.N {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBadgerMemoryChild$", "-test.v")
		cmd.Env = append(os.Environ(), "STATE_MEM_DIR="+b.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			var what string
			var v float64
			if _, err := fmt.Sscanf(strings.TrimSpace(sc.Text()), "mem1m: %s %g", &what, &v); err == nil {
				b.ReportMetric(v, what)
			}
		}
	}
}

// TestBadgerMemoryChild is the child of BenchmarkBadgerMemory1M.
func TestBadgerMemoryChild(t *testing.T) {
	dir := os.Getenv("STATE_MEM_DIR")
	if dir == "" {
		t.Skip("run by BenchmarkBadgerMemory1M")
	}
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("STATE_MEM_N")); err == nil {
		n = v
	}
	opts := BadgerOptions{Path: dir, GCInterval: -1, tune: memTune(os.Getenv("STATE_MEM_OPTS"))}
	peaks := sampleMemory()
	s, err := OpenBadger(opts)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	run := writeSubmits(t, s, n, 400)
	took := time.Since(t0)
	t0 = time.Now()
	gets := readSubmits(t, s, run, n, 100)
	fmt.Printf("mem1m: gets/s %.0f\n", float64(gets)/time.Since(t0).Seconds())
	if p := os.Getenv("STATE_MEM_HEAP"); p != "" {
		writeHeapProfile(t, p)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	anon, file, heap := peaks()
	fmt.Printf("mem1m: rss-peak-MB %d\nmem1m: anon-peak-MB %d\nmem1m: file-peak-MB %d\nmem1m: heap-peak-MB %d\nmem1m: submits/s %.0f\n",
		vmHWM()>>20, anon>>20, file>>20, heap>>20, float64(n)/took.Seconds())
}

// writeHeapProfile writes the heap profile to path.
func writeHeapProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		t.Fatal(err)
	}
}

// writeSubmits writes n submits (Create, then Replace with the outcome)
// from w writers and returns the run's tag (in their keys).
func writeSubmits(t *testing.T, s *BadgerStore, n, w int) int64 {
	ctx := context.Background()
	run := time.Now().UnixNano()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				if err := writeSubmit(ctx, s, run, i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return run
}

// writeSubmit writes submit i of run as the proxy writes a fresh submit:
// its record created in state Sent, then replaced with the outcome.
func writeSubmit(ctx context.Context, s *BadgerStore, run int64, i int) error {
	r := openRecord(i, time.Now())
	r.Key.Key = fmt.Sprintf("new-%x-%d", run, i)
	r.State, r.MessageID, r.History = Sent, "", r.History[:1]
	if _, _, err := s.Create(ctx, r); err != nil {
		return err
	}
	out := r.Clone()
	out.State, out.MessageID = Accepted, fmt.Sprintf("n-%x-%d", run, i)
	out.History = append(out.History, Event{At: time.Now(), State: Accepted, MessageID: out.MessageID})
	return s.Replace(ctx, r, out)
}

// readSubmits reads n/2 records written by writeSubmits (run), spread over
// them, from w readers (a retry of an older submit reads its record), and
// returns the number read.
func readSubmits(t *testing.T, s *BadgerStore, run int64, n, w int) int {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for j := int(next.Add(1)); j <= n/2; j = int(next.Add(1)) {
				i := 1 + (j*7919)%n
				if _, err := s.Get(ctx, Key{Account: "acme", Key: fmt.Sprintf("new-%x-%d", run, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return n / 2
}

// sampleMemory samples the process's anonymous and file-backed RSS and
// the Go heap every 50 ms until the returned function is called, which
// returns their peaks in bytes.
func sampleMemory() func() (anon, file, heap int64) {
	var anon, file, heap int64
	stop, done := make(chan struct{}), make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			a, f := rssParts()
			metrics.Read(sample)
			anon, file, heap = max(anon, a), max(file, f), max(heap, int64(sample[0].Value.Uint64()))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() (int64, int64, int64) {
		close(stop)
		<-done
		return anon, file, heap
	}
}

// rssParts is the process's anonymous and file-backed RSS in bytes.
func rssParts() (anon, file int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "RssAnon":
			anon = kb << 10
		case "RssFile":
			file = kb << 10
		}
	}
	return anon, file
}

// memTune returns a tune function applying "key=value" settings to
// Badger's options (sizes in MiB), or nil for none.
func memTune(spec string) func(badger.Options) badger.Options {
	if spec == "" {
		return nil
	}
	return func(bo badger.Options) badger.Options {
		for _, f := range strings.Fields(spec) {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "compression":
				bo.Compression = map[string]options.CompressionType{"none": options.None, "snappy": options.Snappy, "zstd": options.ZSTD}[v]
			case "memtable":
				bo.MemTableSize = n << 20
				bo.ValueThreshold = min(bo.ValueThreshold, bo.MemTableSize*15/100)
			case "memtables":
				bo.NumMemtables = int(n)
			case "basetable":
				bo.BaseTableSize = n << 20
			case "basetablekb":
				bo.BaseTableSize = n << 10
			case "baselevel":
				bo.BaseLevelSize = n << 20
			case "block":
				bo.BlockCacheSize = n << 20
			case "index":
				bo.IndexCacheSize = n << 20
			case "compactors":
				bo.NumCompactors = int(n)
			case "l0":
				bo.NumLevelZeroTables = int(n)
			case "blocksize": // KiB
				bo.BlockSize = int(n) << 10
			case "zstdlevel":
				bo.ZSTDCompressionLevel = int(n)
			case "l0stall":
				bo.NumLevelZeroTablesStall = int(n)
			}
		}
		return bo
	}
}
