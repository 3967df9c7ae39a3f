package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/config"
	"github.com/smppproxy/smppproxy/state"
)

// openParsed parses a configuration file of the given store keys and
// opens the proxy's store with it (New, not started); it returns what
// Badger runs with.
func openParsed(t *testing.T, storeKeys string) state.BadgerMemory {
	t.Helper()
	return openParsedStore(t, storeKeys).Memory()
}

// openParsedStore is openParsed's store, closed when the test ends.
func openParsedStore(t *testing.T, storeKeys string) *state.BadgerStore {
	t.Helper()
	app := newParsed(t, storeKeys)
	b, ok := app.Store().(*state.BadgerStore)
	if !ok {
		t.Fatalf("store is %T, want *state.BadgerStore", app.Store())
	}
	return b
}

// newParsed parses a configuration file of the given store keys and
// makes the proxy (New, not started), closed when the test ends.
func newParsed(t *testing.T, storeKeys string) *App {
	t.Helper()
	src := fmt.Sprintf(`store:
  path: %q
%s
upstreams:
  - {name: smsc, address: "127.0.0.1:1", system_id: p, password: pw}
accounts:
  - {system_id: shop, password: secret1, route: [smsc]}
`, t.TempDir(), storeKeys)
	cfg, err := config.Parse([]byte(src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	app, err := New(Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	return app
}

func TestStoreMemoryDefaultsOfTheConfigurationReachBadger(t *testing.T) {
	got := openParsed(t, "")
	want := state.BadgerMemory{
		MemtableSize: state.DefaultMemtableSize, NumMemtables: state.DefaultNumMemtables,
		BlockCacheSize: state.DefaultBlockCacheSize, IndexCacheSize: state.DefaultIndexCacheSize,
		BaseTableSize: state.DefaultTableSize, NumCompactors: 2, Compression: state.DefaultCompression,
	}
	if got != want {
		t.Errorf("a configuration without store memory keys runs Badger with %+v, want %+v", got, want)
	}
}

func TestStoreMemoryKeysOfTheConfigurationReachBadger(t *testing.T) {
	got := openParsed(t, "  memtable_size: 4MiB\n  num_memtables: 3\n  block_cache_size: 1MiB\n  index_cache_size: 2MiB\n  table_size: 3MiB\n")
	if got.MemtableSize != 4<<20 || got.NumMemtables != 3 || got.BlockCacheSize != 1<<20 || got.IndexCacheSize != 2<<20 || got.BaseTableSize != 3<<20 {
		t.Errorf("store keys 4MiB × 3, caches 1MiB and 2MiB, tables of 3MiB run Badger with %+v", got)
	}
}

func TestStoreCommitDelayOfTheConfigurationReachesTheStore(t *testing.T) {
	if got := openParsedStore(t, "").CommitDelay(); got != 0 {
		t.Errorf("a configuration without store.commit_delay runs the store with a delay of %s, want none", got)
	}
	if got := openParsedStore(t, "  commit_delay: 800us\n").CommitDelay(); got != 800*time.Microsecond {
		t.Errorf("store.commit_delay: 800us runs the store with a delay of %s", got)
	}
}

// store.recent_answers reaches the engine; absent, the engine keeps the
// documented default.
func TestRecentAnswersReachTheEngine(t *testing.T) {
	for keys, want := range map[string]int{"  recent_answers: 1000": 1000, "": config.DefaultRecentAnswers} {
		app := newParsed(t, keys)
		if got := app.Engine().RecentAnswers(); got != want {
			t.Errorf("store keys %q: the engine remembers %d answers, want %d", keys, got, want)
		}
	}
}
