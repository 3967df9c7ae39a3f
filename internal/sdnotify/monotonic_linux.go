package sdnotify

import (
	"syscall"
	"unsafe"
)

// clockMonotonic is CLOCK_MONOTONIC of clock_gettime(2).
const clockMonotonic = 1

// monotonicUsec reads CLOCK_MONOTONIC in microseconds, the clock of
// systemd's MONOTONIC_USEC.
func monotonicUsec() (int64, bool) {
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0, false
	}
	return ts.Nano() / 1000, true
}
