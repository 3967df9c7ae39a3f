//go:build !linux

package state

// releasesMapped: no pass over the tables' pages runs where the advice's
// effect on a shared file mapping is not the one relied on
// (tablepages.go).
const releasesMapped = false

// releaseMapped does nothing (see releasesMapped).
func releaseMapped([]byte) error { return nil }
