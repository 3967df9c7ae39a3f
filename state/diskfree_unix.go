//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package state

import "syscall"

// diskFree returns the bytes available to an unprivileged writer on the
// file system holding path.
func diskFree(path string) (uint64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true
}
