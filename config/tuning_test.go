package config

import (
	"strings"
	"testing"
	"time"
)

func TestStoreMemorySizesAcceptUnitsAndPlainBytes(t *testing.T) {
	c := mustParse(t, base+`store:
  memtable_size: 16MiB
  block_cache_size: "8 MB"
  index_cache_size: 65536
  value_threshold: 1KiB
  num_memtables: 3
`)
	if got, want := c.Store.MemtableSize, Bytes(16<<20); got != want {
		t.Errorf("memtable_size = %d, want %d", got, want)
	}
	if got, want := c.Store.BlockCacheSize, Bytes(8_000_000); got != want {
		t.Errorf("block_cache_size = %d, want %d", got, want)
	}
	if got, want := c.Store.IndexCacheSize, Bytes(65536); got != want {
		t.Errorf("index_cache_size = %d, want %d", got, want)
	}
	if got, want := c.Store.ValueThreshold, Bytes(1024); got != want {
		t.Errorf("value_threshold = %d, want %d", got, want)
	}
	if c.Store.NumMemtables != 3 {
		t.Errorf("num_memtables = %d, want 3", c.Store.NumMemtables)
	}
	if got := c.Store.MemtableSize.String(); got != "16MiB" {
		t.Errorf("String() = %q, want 16MiB", got)
	}
}

func TestStoreMemorySizeRejectsNonsenseWithItsPath(t *testing.T) {
	for _, v := range []string{"-1", "lots", "12 parsecs", "[1]", "99999999GiB"} {
		errs := parseErrors(t, base+"store:\n  memtable_size: "+v+"\n")
		if len(errs) != 1 || errs[0].Path != "store.memtable_size" || !strings.Contains(errs[0].Msg, "size") {
			t.Errorf("memtable_size: %s -> %v, want one error at store.memtable_size about a size", v, errs)
		}
	}
}

func TestPprofOffLoopbackNeedsAToken(t *testing.T) {
	errs := parseErrors(t, base+"admin:\n  address: 0.0.0.0:9775\n  pprof: true\n")
	found := false
	for _, e := range errs {
		found = found || e.Path == "admin.pprof"
	}
	if !found {
		t.Errorf("pprof on 0.0.0.0 without a token: errors %v, want one at admin.pprof", errs)
	}
	if c := mustParse(t, base+"admin:\n  pprof: true\n"); !c.Admin.Pprof {
		t.Error("pprof: true on the loopback default was not kept")
	}
}

func TestPostgresStoreNeedsADSNAndSaneLimits(t *testing.T) {
	c := mustParse(t, base+"store:\n  backend: postgres\n  dsn: postgres://proxy@db:5432/smppproxy\n")
	if c.Store.Lease.Std().Seconds() != 10 || c.Store.MaxConns != 16 || c.Store.Migrate != MigrateAuto {
		t.Errorf("postgres defaults = lease %v, max_conns %d, migrate %q; want 10s, 16, auto", c.Store.Lease, c.Store.MaxConns, c.Store.Migrate)
	}
	for name, tc := range map[string]struct{ src, path string }{
		"no dsn":           {"store:\n  backend: postgres\n", "store.dsn"},
		"both dsn forms":   {"store:\n  backend: postgres\n  dsn: x\n  dsn_file: f\n", "store.dsn_file"},
		"no connections":   {"store:\n  backend: postgres\n  dsn: x\n  max_conns: 0\n", "store.max_conns"},
		"too few conns":    {"store:\n  backend: postgres\n  dsn: x\n  max_conns: 9\n", "store.max_conns"},
		"migrate typo":     {"store:\n  backend: postgres\n  dsn: x\n  migrate: sometimes\n", "store.migrate"},
		"dsn under badger": {"store:\n  dsn: x\n", "store.dsn"},
		"lease too short":  {"store:\n  backend: postgres\n  dsn: x\n  lease: 10ns\n", "store.lease"},
	} {
		errs := parseErrors(t, base+tc.src)
		if len(errs) != 1 || errs[0].Path != tc.path {
			t.Errorf("%s: errors %v, want one at %s", name, errs, tc.path)
		}
	}
}

func TestAccountThroughputAboveItsRouteIsWarned(t *testing.T) {
	c := mustParse(t, `upstreams:
  - {name: a, address: "127.0.0.1:2776", system_id: p, throughput: 100}
  - {name: b, address: "127.0.0.1:2778", system_id: p, throughput: 50}
  - {name: free, address: "127.0.0.1:2779", system_id: p}
accounts:
  - {system_id: fast, password: pw, throughput: 200, route: [a, b]}
  - {system_id: fits, password: pw, throughput: 150, route: [a, b]}
  - {system_id: open, password: pw, throughput: 900, route: [a, free]}
`)
	var got []string
	for _, w := range c.Warnings() {
		if strings.Contains(w, "throughput") {
			got = append(got, w)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "accounts[0].throughput") || !strings.Contains(got[0], "(150/s)") {
		t.Errorf("throughput warnings = %q, want one for accounts[0] naming the route's 150/s", got)
	}
}

func TestCommitLogIsOnUnlessTurnedOff(t *testing.T) {
	if c := mustParse(t, base); c.Store.CommitLog != nil {
		t.Errorf("commit_log absent = %v, want unset (on)", *c.Store.CommitLog)
	}
	if c := mustParse(t, base+"store:\n  commit_log: false\n"); c.Store.CommitLog == nil || *c.Store.CommitLog {
		t.Error("commit_log: false was not kept")
	}
}

func TestStoreTableSizeIsBoundedWithItsPath(t *testing.T) {
	if c := mustParse(t, base+"store:\n  table_size: 512KiB\n"); c.Store.TableSize != 512<<10 {
		t.Errorf("table_size: 512KiB -> %d, want %d", c.Store.TableSize, 512<<10)
	}
	if c := mustParse(t, base); c.Store.TableSize != 0 {
		t.Errorf("no table_size -> %d, want 0 (the store's default)", c.Store.TableSize)
	}
	for _, v := range []string{"4KiB", "65535", "65MiB", "1GiB"} {
		errs := parseErrors(t, base+"store:\n  table_size: "+v+"\n")
		if len(errs) != 1 || errs[0].Path != "store.table_size" || !strings.Contains(errs[0].Msg, "between 64KiB and 64MiB") {
			t.Errorf("table_size: %s -> %v, want one error at store.table_size naming the bounds", v, errs)
		}
	}
}

func TestStoreTableSizeAcceptsItsBounds(t *testing.T) {
	for _, v := range []string{"64KiB", "64MiB"} {
		if c := mustParse(t, base+"store:\n  table_size: "+v+"\n"); c.Store.TableSize.String() != v {
			t.Errorf("table_size: %s -> %s, want it kept", v, c.Store.TableSize)
		}
	}
}

func TestStoreCommitDelayIsBoundedWithItsPath(t *testing.T) {
	if c := mustParse(t, base+"store:\n  commit_delay: 800us\n"); c.Store.CommitDelay.Std() != 800*time.Microsecond {
		t.Errorf("commit_delay: 800us -> %s, want 800µs", c.Store.CommitDelay)
	}
	if c := mustParse(t, base+"store:\n  commit_delay: 10ms\n"); c.Store.CommitDelay.Std() != 10*time.Millisecond {
		t.Errorf("commit_delay: 10ms -> %s, want it kept (the bound)", c.Store.CommitDelay)
	}
	if c := mustParse(t, base); c.Store.CommitDelay != 0 {
		t.Errorf("no commit_delay -> %s, want 0 (none)", c.Store.CommitDelay)
	}
	if errs := parseErrors(t, base+"store:\n  commit_delay: -1ms\n"); len(errs) != 1 || errs[0].Path != "store.commit_delay" {
		t.Errorf("commit_delay: -1ms -> %v, want one error at store.commit_delay", errs)
	}
	for _, v := range []string{"11ms", "1s"} {
		errs := parseErrors(t, base+"store:\n  commit_delay: "+v+"\n")
		if len(errs) != 1 || errs[0].Path != "store.commit_delay" || !strings.Contains(errs[0].Msg, "between 0 and 10ms") {
			t.Errorf("commit_delay: %s -> %v, want one error at store.commit_delay naming the bounds", v, errs)
		}
	}
}

func TestStoreCommitDelayIsRefusedWithThePostgresBackend(t *testing.T) {
	errs := parseErrors(t, base+"store:\n  backend: postgres\n  dsn: postgres://proxy@db:5432/smppproxy\n  commit_delay: 1ms\n")
	if len(errs) != 1 || errs[0].Path != "store.commit_delay" || !strings.Contains(errs[0].Msg, "backend: badger") {
		t.Errorf("commit_delay with backend postgres -> %v, want one error at store.commit_delay saying it is for badger", errs)
	}
}

func TestStoreRecentAnswersIsBoundedOnEitherBackend(t *testing.T) {
	if c := mustParse(t, base+"store:\n  recent_answers: 1000\n"); c.Store.RecentAnswers != 1000 {
		t.Errorf("recent_answers: 1000 -> %d, want it kept", c.Store.RecentAnswers)
	}
	pg := base + "store:\n  backend: postgres\n  dsn: postgres://proxy@db:5432/smppproxy\n  recent_answers: 4194304\n"
	if c := mustParse(t, pg); c.Store.RecentAnswers != MaxRecentAnswers {
		t.Errorf("recent_answers: 4194304 on postgres -> %d, want it kept (the bound)", c.Store.RecentAnswers)
	}
	for _, v := range []string{"-1", "4194305"} {
		errs := parseErrors(t, base+"store:\n  recent_answers: "+v+"\n")
		if len(errs) != 1 || errs[0].Path != "store.recent_answers" || !strings.Contains(errs[0].Msg, "between 0 (the default, 262144) and 4194304") {
			t.Errorf("recent_answers: %s -> %v, want one error at store.recent_answers naming the bounds", v, errs)
		}
	}
}
