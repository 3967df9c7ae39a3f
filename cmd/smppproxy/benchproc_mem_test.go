package main

import (
	"os"
	"runtime"
	"testing"
)

// The sampler reports the anonymous and file-backed parts of a process's
// RSS separately: memory this process touched shows in the anonymous
// peak, its mapped executable in the file-backed one; stopping it twice
// is safe and keeps the peaks.
func TestRSSSamplerReportsAnonymousAndFileBackedPeaks(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	s := startRSSSampler(os.Getpid())
	const size = 64 << 20
	buf := make([]byte, size)
	for i := range buf {
		if i%4096 == 0 {
			buf[i] = 1 // touched: resident
		}
	}
	anon, file := s.stopPeaks()
	runtime.KeepAlive(buf)
	if anon < size>>10 {
		t.Errorf("anonymous peak %d kB with %d kB just touched: want at least that", anon, size>>10)
	}
	if file <= 0 {
		t.Errorf("file-backed peak %d kB: the executable is mapped, want > 0", file)
	}
	if a2, f2 := s.stopPeaks(); a2 < anon || f2 < file {
		t.Errorf("stopped again: %d / %d kB, want the peaks kept (%d / %d)", a2, f2, anon, file)
	}
	var none *rssSampler
	if a, f := none.stopPeaks(); a != 0 || f != 0 {
		t.Errorf("a nil sampler reported %d / %d kB", a, f)
	}
}
