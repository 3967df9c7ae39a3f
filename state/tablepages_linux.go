package state

import "syscall"

// releasesMapped: the passes over the tables' pages run (tablepages.go).
const releasesMapped = true

// releaseMapped advises the kernel that the pages of b, a shared mapping
// of a file, need not stay mapped (see tablepages.go).
func releaseMapped(b []byte) error { return syscall.Madvise(b, syscall.MADV_DONTNEED) }
