package main

import (
	"math"
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
