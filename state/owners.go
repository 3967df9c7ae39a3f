package state

import (
	"context"
	"strings"
)

// OwnerLeases is implemented by a store shared by several processes (proxy
// instances on one database): it tells whether the instance that owns a
// record is presumed alive. A duplicate of a record still `sent` by a
// dead owner waits for nothing: the owner will never write its outcome,
// and the record becomes unknown once the owner's lease has run out. A
// store of one process does not implement it (the owner is the process
// itself, or a previous run that Recover settles at start).
type OwnerLeases interface {
	// InstanceLive reports whether instance (the part of a record's Owner
	// before its last "/") is presumed alive: it has a lease and has been
	// renewing it on time. An instance that stopped renewing (killed,
	// partitioned from the database) is presumed dead before its lease
	// runs out.
	InstanceLive(ctx context.Context, instance string) (bool, error)
}

// OwnerInstance is the instance part of a record's Owner "instance/run.n":
// everything before its last "/" ("" when there is none).
func OwnerInstance(owner string) string {
	if i := strings.LastIndexByte(owner, '/'); i >= 0 {
		return owner[:i]
	}
	return ""
}

// NoteLeaseExpired is the note of the event that made a record unknown
// because its owner instance's lease ran out while it was sent (not
// because its owner gave up on it): the owner may be alive all the same,
// cut off from the store, and still write the outcome it gets.
const NoteLeaseExpired = "owner instance's lease expired while sent"
