//go:build !linux

package sdnotify

// monotonicUsec is unavailable outside Linux, where systemd does not run:
// Reloading then sends RELOADING=1 alone.
func monotonicUsec() (int64, bool) { return 0, false }
