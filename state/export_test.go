package state

// WithCommitLogRotate returns o with its commit log segments rotated at
// size bytes (for the crash tests of package state_test).
func WithCommitLogRotate(o BadgerOptions, size int64) BadgerOptions {
	o.commitLogRotate = size
	return o
}
