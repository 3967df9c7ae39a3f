//go:build !linux

package state

// releaseMapped does nothing where the advice's effect on a shared file
// mapping is not the one relied on (see tablepages.go).
func releaseMapped([]byte) error { return nil }
