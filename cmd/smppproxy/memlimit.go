package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/smppproxy/smppproxy/config"
)

// applyMemoryLimit puts memory_limit in force as the Go runtime's soft
// memory limit (0: none), unless the GOMEMLIMIT environment variable
// (env) set one, which wins. It returns the limit in force (math.MaxInt64:
// none) and whether it came from GOMEMLIMIT.
func applyMemoryLimit(limit config.Bytes, env string) (inForce int64, fromEnv bool) {
	if env != "" {
		return debug.SetMemoryLimit(-1), true
	}
	if limit == 0 {
		debug.SetMemoryLimit(math.MaxInt64)
		return math.MaxInt64, false
	}
	debug.SetMemoryLimit(int64(limit))
	return int64(limit), false
}

// memoryLimitString describes a limit applyMemoryLimit returned.
func memoryLimitString(n int64) string {
	if n == math.MaxInt64 {
		return "none"
	}
	return config.Bytes(n).String()
}

// applyGCPercent puts gc_percent (or Go's 100, see
// config.GCPercentOrDefault) in force as the collector's target, unless
// the GOGC environment variable (env) set one, which wins. It returns the
// percentage in force and whether it came from GOGC.
func applyGCPercent(cfg *config.Config, env string) (inForce int, fromEnv bool) {
	if env != "" {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p, true
	}
	p := cfg.GCPercentOrDefault()
	debug.SetGCPercent(p)
	return p, false
}

// applyMaxProcs puts max_procs (or its automatic choice, see
// config.MaxProcsOrDefault) in force as GOMAXPROCS, unless the GOMAXPROCS
// environment variable (env) set one the runtime took (a positive
// number), which wins. The automatic choice starts from what the runtime
// chooses now (a container's CPU limit may have changed since start);
// when it stays the runtime's, the runtime keeps making it. It returns the
// processors in force and whether they came from GOMAXPROCS.
func applyMaxProcs(cfg *config.Config, env string) (inForce int, fromEnv bool) {
	if n, err := strconv.Atoi(env); err == nil && n > 0 {
		return runtime.GOMAXPROCS(0), true
	}
	runtime.SetDefaultGOMAXPROCS()
	def := runtime.GOMAXPROCS(0)
	n := cfg.MaxProcsOrDefault(def, cpuLimited(def))
	if n != def {
		runtime.GOMAXPROCS(n)
	}
	return n, false
}

// cpuLimited reports whether a CPU limit holds this process back, given
// the runtime's choice def: below the host's CPUs, or a cgroup quota.
func cpuLimited(def int) bool {
	return def != runtime.NumCPU() || cpuQuota("/sys/fs/cgroup", "/proc/self/cgroup")
}

// cpuQuota reports whether a cgroup limits this process's CPU time, in
// the cgroup selfCgroup (/proc/self/cgroup) names or any of its
// ancestors, under the hierarchy mounted at root: cgroup v2's cpu.max
// other than "max", or cgroup v1's cpu.cfs_quota_us other than -1. The Go
// runtime rounds a limit below 2 CPUs up to 2, so on a 2-CPU host a limit
// of 1 leaves its choice at the host's CPUs: only the files tell. What
// cannot be read counts as no limit.
func cpuQuota(root, selfCgroup string) bool {
	b, err := os.ReadFile(selfCgroup)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = root, "cpu.max"
		case slices.Contains(strings.Split(parts[1], ","), "cpu"):
			dir, file = filepath.Join(root, parts[1]), "cpu.cfs_quota_us"
		default:
			continue
		}
		for d := filepath.Join(dir, filepath.Clean("/"+parts[2])); ; d = filepath.Dir(d) {
			if limited(filepath.Join(d, file)) {
				return true
			}
			if len(d) <= len(dir) {
				break
			}
		}
	}
	return false
}

// limited reports whether the cgroup file path (cpu.max or
// cpu.cfs_quota_us) sets a quota.
func limited(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false
	}
	if filepath.Base(path) == "cpu.max" {
		return f[0] != "max"
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	return err == nil && q > 0
}
