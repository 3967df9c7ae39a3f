//go:build !linux

package state

import "os"

// fdatasync syncs f (fsync where fdatasync is not available).
func fdatasync(f *os.File) error { return f.Sync() }
