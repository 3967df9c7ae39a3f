package state

// Checkpoint writes the marker file's high-water mark now (tests).
func Checkpoint(s *BadgerStore) error { return s.checkpoint() }
