package pgstore

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

// The PostgreSQL store keeps the contract of every state.Store and
// state.Queue: the conformance suite, each test on a schema of its own.
func TestConformance(t *testing.T) {
	dsn := testDSN(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) state.Store {
		return openTest(t, Options{DSN: dsn, Now: now})
	})
}
