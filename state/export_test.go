package state

// WithCommitLogRotate returns o with its commit log segments rotated at
// size bytes (for the crash tests of package state_test).
func WithCommitLogRotate(o BadgerOptions, size int64) BadgerOptions {
	o.commitLogRotate = size
	return o
}

// keyFilterState is what the filter of record keys holds, for tests.
type keyFilterState struct {
	Builds int
	Room   uint
	Scans  int // builds from a scan begun (the others were loaded)
}

func (s *BadgerStore) keyFilterState() keyFilterState {
	s.keys.mu.RLock()
	defer s.keys.mu.RUnlock()
	return keyFilterState{Builds: s.keys.builds, Room: s.keys.room, Scans: s.keys.scans}
}
