package proxy

import (
	"runtime"
	"testing"
)

// serve may run more processors than CPUs (max_procs automatic is 8 on a
// 2-CPU host): the bcrypt checks a bind flood may run at once stay two per
// CPU the runtime can use, so they cannot take every processor from the
// submits.
func TestBcryptChecksAtOnceAreTwoPerUsableCPUNotPerProcessor(t *testing.T) {
	prev := runtime.GOMAXPROCS(4 * runtime.NumCPU())
	defer runtime.GOMAXPROCS(prev)
	a := newAccountAuth(nil, nil, nil)
	if got, want := cap(a.checks), 2*runtime.NumCPU(); got != want {
		t.Errorf("GOMAXPROCS %d on %d CPUs: %d checks at once, want %d", 4*runtime.NumCPU(), runtime.NumCPU(), got, want)
	}
	runtime.GOMAXPROCS(1)
	if got := cap(newAccountAuth(nil, nil, nil).checks); got != 2 {
		t.Errorf("GOMAXPROCS 1: %d checks at once, want 2", got)
	}
}
