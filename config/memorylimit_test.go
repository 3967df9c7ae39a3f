package config

import "testing"

func TestMemoryLimitDefaultsAndZeroMeansNone(t *testing.T) {
	if c := mustParse(t, base); c.MemoryLimit != DefaultMemoryLimit || DefaultMemoryLimit == 0 {
		t.Errorf("memory_limit absent = %s, want the default %s (not 0)", c.MemoryLimit, DefaultMemoryLimit)
	}
	if c := mustParse(t, base+"memory_limit: 0\n"); c.MemoryLimit != 0 {
		t.Errorf("memory_limit: 0 = %s, want 0 (no limit) kept", c.MemoryLimit)
	}
	if c := mustParse(t, base+"memory_limit: 256MiB\n"); c.MemoryLimit != 256<<20 {
		t.Errorf("memory_limit: 256MiB = %d, want %d", c.MemoryLimit, 256<<20)
	}
}

func TestMemoryLimitTooSmallIsRefusedWithItsPath(t *testing.T) {
	errs := parseErrors(t, base+"memory_limit: 1MiB\n")
	if len(errs) != 1 || errs[0].Path != "memory_limit" {
		t.Errorf("memory_limit: 1MiB -> %v, want one error at memory_limit", errs)
	}
	if c := mustParse(t, base+"memory_limit: "+MinMemoryLimit.String()+"\n"); c.MemoryLimit != MinMemoryLimit {
		t.Errorf("memory_limit at the minimum = %s, want %s kept", c.MemoryLimit, MinMemoryLimit)
	}
}

// gc_percent: 0 or absent is Go's 100, whatever the store; a value is
// kept; one out of range is refused with its path.
func TestGCPercentDefaultsToGosAndIsBounded(t *testing.T) {
	if c := mustParse(t, base); c.GCPercent != 0 || c.GCPercentOrDefault() != 100 {
		t.Errorf("gc_percent absent: %d in force %d, want 0 and 100", c.GCPercent, c.GCPercentOrDefault())
	}
	if c := mustParse(t, base+"gc_percent: 300\n"); c.GCPercentOrDefault() != 300 {
		t.Errorf("gc_percent: 300 in force %d, want 300", c.GCPercentOrDefault())
	}
	for _, bad := range []string{"10", "5000", "-1"} {
		if errs := parseErrors(t, base+"gc_percent: "+bad+"\n"); len(errs) != 1 || errs[0].Path != "gc_percent" {
			t.Errorf("gc_percent: %s -> %v, want one error at gc_percent", bad, errs)
		}
	}
}

// max_procs: 0 or absent is automatic — Go's choice, raised to
// MinAutoProcs (8) with the embedded store on a host of fewer CPUs that no CPU
// limit holds back; a value is taken as is, and out of range is an error.
func TestMaxProcsIsAutomaticUnlessSetAndIsBounded(t *testing.T) {
	c := mustParse(t, base)
	if c.MaxProcs != 0 {
		t.Fatalf("max_procs absent parsed as %d, want 0", c.MaxProcs)
	}
	for _, tc := range []struct {
		name       string
		goDefault  int
		cpuLimited bool
		want       int
	}{
		{"2 CPUs, no CPU limit: raised to 8", 2, false, 8},
		{"1 CPU, no CPU limit: raised", 1, false, MinAutoProcs},
		{"4 CPUs, no CPU limit: raised to 8", 4, false, 8},
		{"6 CPUs, no CPU limit: raised to 8", 6, false, 8},
		{"4 CPUs, a CPU limit: Go's choice", 4, true, 4},
		{"8 CPUs: Go's choice", 8, false, 8},
		{"12 CPUs: Go's choice", 12, false, 12},
		{"a CPU limit (Go chose 2): Go's choice, never above the limit", 2, true, 2},
	} {
		if got := c.MaxProcsOrDefault(tc.goDefault, tc.cpuLimited); got != tc.want {
			t.Errorf("badger, %s: %d, want %d", tc.name, got, tc.want)
		}
	}
	pg := *c
	pg.Store.Backend = BackendPostgres
	if got := pg.MaxProcsOrDefault(2, false); got != 2 {
		t.Errorf("postgres on 2 CPUs: %d, want Go's 2 (the database shares the CPUs)", got)
	}
	if c := mustParse(t, base+"max_procs: 3\n"); c.MaxProcsOrDefault(2, false) != 3 || c.MaxProcsOrDefault(16, true) != 3 {
		t.Errorf("max_procs: 3 in force %d / %d, want 3 whatever the host", c.MaxProcsOrDefault(2, false), c.MaxProcsOrDefault(16, true))
	}
	for _, bad := range []string{"-1", "1025"} {
		if errs := parseErrors(t, base+"max_procs: "+bad+"\n"); len(errs) != 1 || errs[0].Path != "max_procs" {
			t.Errorf("max_procs: %s -> %v, want one error at max_procs", bad, errs)
		}
	}
}
