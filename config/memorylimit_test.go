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
