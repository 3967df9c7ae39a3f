package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/smppproxy/smppproxy/config"
)

func TestMemoryLimitComesFromTheConfigUnlessGOMEMLIMITIsSet(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })

	if lim, env := applyMemoryLimit(300<<20, ""); lim != 300<<20 || env || debug.SetMemoryLimit(-1) != 300<<20 {
		t.Errorf("memory_limit 300MiB: in force %d (from env %v, runtime %d), want %d from the config", lim, env, debug.SetMemoryLimit(-1), 300<<20)
	}
	if lim, _ := applyMemoryLimit(0, ""); lim != math.MaxInt64 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("memory_limit 0: in force %d (runtime %d), want no limit", lim, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(500 << 20) // what the runtime does with GOMEMLIMIT=500MiB
	if lim, env := applyMemoryLimit(300<<20, "500MiB"); lim != 500<<20 || !env || debug.SetMemoryLimit(-1) != 500<<20 {
		t.Errorf("GOMEMLIMIT=500MiB, memory_limit 300MiB: in force %d (from env %v), want GOMEMLIMIT's %d", lim, env, 500<<20)
	}
	if s := memoryLimitString(math.MaxInt64); s != "none" {
		t.Errorf("no limit described as %q, want none", s)
	}
}

func TestGCPercentComesFromTheConfigUnlessGOGCIsSet(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	current := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }

	cfg := &config.Config{GCPercent: 250}
	if p, env := applyGCPercent(cfg, ""); p != 250 || env || current() != 250 {
		t.Errorf("gc_percent 250: in force %d (from env %v, runtime %d), want 250 from the config", p, env, current())
	}
	if p, _ := applyGCPercent(&config.Config{}, ""); p != 100 || current() != 100 {
		t.Errorf("gc_percent absent: in force %d (runtime %d), want Go's 100", p, current())
	}
	debug.SetGCPercent(150) // what the runtime does with GOGC=150
	if p, env := applyGCPercent(cfg, "150"); p != 150 || !env || current() != 150 {
		t.Errorf("GOGC=150, gc_percent 250: in force %d (from env %v), want GOGC's 150", p, env)
	}
}

func TestMaxProcsComesFromTheConfigUnlessGOMAXPROCSIsSet(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })

	if n, env := applyMaxProcs(&config.Config{MaxProcs: 3}, ""); n != 3 || env || runtime.GOMAXPROCS(0) != 3 {
		t.Errorf("max_procs 3: in force %d (from env %v, runtime %d), want 3 from the config", n, env, runtime.GOMAXPROCS(0))
	}
	auto := &config.Config{}
	want := auto.MaxProcsOrDefault(goDefaultProcs, runtime.NumCPU())
	if n, env := applyMaxProcs(auto, ""); n != want || env || runtime.GOMAXPROCS(0) != want {
		t.Errorf("max_procs absent: in force %d (from env %v, runtime %d), want the automatic %d", n, env, runtime.GOMAXPROCS(0), want)
	}
	runtime.GOMAXPROCS(5) // what the runtime does with GOMAXPROCS=5
	if n, env := applyMaxProcs(&config.Config{MaxProcs: 3}, "5"); n != 5 || !env || runtime.GOMAXPROCS(0) != 5 {
		t.Errorf("GOMAXPROCS=5, max_procs 3: in force %d (from env %v), want GOMAXPROCS's 5", n, env)
	}
}
