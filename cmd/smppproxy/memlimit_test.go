package main

import (
	"math"
	"os"
	"path/filepath"
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
	if os.Getenv("GOMAXPROCS") == "" { // else the runtime's default is the variable's
		auto := &config.Config{}
		runtime.SetDefaultGOMAXPROCS()
		def := runtime.GOMAXPROCS(0)
		want := auto.MaxProcsOrDefault(def, cpuLimited(def))
		runtime.GOMAXPROCS(7) // applying starts from the runtime's choice, not from this
		if n, env := applyMaxProcs(auto, ""); n != want || env || runtime.GOMAXPROCS(0) != want {
			t.Errorf("max_procs absent: in force %d (from env %v, runtime %d), want the automatic %d", n, env, runtime.GOMAXPROCS(0), want)
		}
	}
	runtime.GOMAXPROCS(5) // what the runtime does with GOMAXPROCS=5
	if n, env := applyMaxProcs(&config.Config{MaxProcs: 3}, "5"); n != 5 || !env || runtime.GOMAXPROCS(0) != 5 {
		t.Errorf("GOMAXPROCS=5, max_procs 3: in force %d (from env %v), want GOMAXPROCS's 5", n, env)
	}
	// A value the runtime ignores (it then makes its own choice) does not
	// override max_procs.
	if n, env := applyMaxProcs(&config.Config{MaxProcs: 3}, "0"); n != 3 || env {
		t.Errorf("GOMAXPROCS=0, max_procs 3: in force %d (from env %v), want 3 from the config", n, env)
	}
}

// A CPU limit is read from the cgroup files, in the process's own cgroup
// or an ancestor's, v2 or v1; "max" and -1 are none.
func TestCPUQuotaIsReadFromTheProcessCgroup(t *testing.T) {
	write := func(t *testing.T, path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		self  string
		want  bool
	}{
		{"v2, limit in the own cgroup", map[string]string{"kubepods/pod1/cpu.max": "100000 100000\n"}, "0::/kubepods/pod1\n", true},
		{"v2, limit in an ancestor", map[string]string{"kubepods/cpu.max": "50000 100000\n", "kubepods/pod1/cpu.max": "max 100000\n"}, "0::/kubepods/pod1\n", true},
		{"v2, no limit", map[string]string{"system.slice/x.service/cpu.max": "max 100000\n"}, "0::/system.slice/x.service\n", false},
		{"v2, root cgroup (no cpu.max)", nil, "0::/\n", false},
		{"v1, limit", map[string]string{"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "100000\n"}, "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n", true},
		{"v1, none", map[string]string{"cpu/cpu.cfs_quota_us": "-1\n"}, "1:cpu:/\n0::/\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, s := range tc.files {
				write(t, filepath.Join(root, p), s)
			}
			self := filepath.Join(t.TempDir(), "cgroup")
			write(t, self, tc.self)
			if got := cpuQuota(root, self); got != tc.want {
				t.Errorf("cpuQuota = %v, want %v", got, tc.want)
			}
		})
	}
	if cpuQuota(t.TempDir(), filepath.Join(t.TempDir(), "absent")) {
		t.Error("no /proc/self/cgroup read as a CPU limit")
	}
}
