package pgstore

import (
	"crypto/sha256"
	"testing"
)

func TestEveryInstanceGetsTheOneFingerprintSecret(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t, dsn)
	a := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "a", Migrate: true})
	b := openTest(t, Options{DSN: dsn, Schema: schema, InstanceID: "b"})
	sa, createdA, err := a.LoadOrCreate(bg)
	if err != nil || !createdA {
		t.Fatalf("first LoadOrCreate = %v, created %v; want created", err, createdA)
	}
	sb, createdB, err := b.LoadOrCreate(bg)
	if err != nil || createdB {
		t.Fatalf("second instance's LoadOrCreate = %v, created %v; want the existing secret", err, createdB)
	}
	fp := sha256.Sum256([]byte("same submit"))
	if sa.Tag(fp) != sb.Tag(fp) {
		t.Error("two instances tag one fingerprint differently: their secrets differ")
	}
}
