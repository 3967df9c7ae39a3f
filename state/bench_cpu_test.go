package state_test

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per write since cpu0 (the whole
// process: Badger's goroutines and the writers).
func reportCPU(b *testing.B, cpu0 time.Duration, writes int) {
	if writes > 0 {
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(writes), "cpu-µs/write")
	}
}
