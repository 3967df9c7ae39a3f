package main

import (
	"math"
	"runtime"
	"runtime/debug"

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

// goDefaultProcs is the GOMAXPROCS the Go runtime chose at start (before
// applyMaxProcs changed it): the host's CPUs, or fewer under a container's
// CPU limit.
var goDefaultProcs = runtime.GOMAXPROCS(0)

// applyMaxProcs puts max_procs (or its automatic choice, see
// config.MaxProcsOrDefault) in force as GOMAXPROCS, unless the GOMAXPROCS
// environment variable (env) set one, which wins. When the choice is the
// Go runtime's own, the runtime keeps making it (it follows a container's
// CPU limit as that changes). It returns the processors in force and
// whether they came from GOMAXPROCS.
func applyMaxProcs(cfg *config.Config, env string) (inForce int, fromEnv bool) {
	if env != "" {
		return runtime.GOMAXPROCS(0), true
	}
	n := cfg.MaxProcsOrDefault(goDefaultProcs, runtime.NumCPU())
	if cfg.MaxProcs == 0 && n == goDefaultProcs {
		runtime.SetDefaultGOMAXPROCS()
		return runtime.GOMAXPROCS(0), false
	}
	runtime.GOMAXPROCS(n)
	return n, false
}
