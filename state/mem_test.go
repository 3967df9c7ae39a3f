package state_test

import (
	"testing"
	"time"

	"github.com/smppproxy/smppproxy/state"
	"github.com/smppproxy/smppproxy/state/storetest"
)

func TestMemStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) state.Store {
		return state.NewMem(now)
	})
}
