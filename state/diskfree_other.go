//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package state

// diskFree is unknown on this platform: the free-space guard is off.
func diskFree(string) (uint64, bool) { return 0, false }
