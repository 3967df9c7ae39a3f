//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package state

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes the lock Badger takes on its directory (flock on the
// directory itself) while the store is inspected before Badger opens it,
// so that a directory in use by another process is reported as such, not
// as damaged by the changes that process is making. A missing directory
// needs no lock.
func lockDir(path string) (unlock func(), err error) {
	d, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: open store directory: %w", err)
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		d.Close()
		return nil, fmt.Errorf("state: store directory %s is in use by another process: %w", path, err)
	}
	return func() { d.Close() }, nil // closing releases the lock
}
