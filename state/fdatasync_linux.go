package state

import (
	"os"
	"syscall"
)

// fdatasync syncs f's data (and the size, not the other metadata).
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
