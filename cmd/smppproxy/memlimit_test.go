package main

import (
	"math"
	"runtime/debug"
	"testing"
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
