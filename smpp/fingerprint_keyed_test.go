package smpp_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/smpp/smpptest"
)

// The version-1 fingerprint of records already on disk must not change:
// retries of those records are compared with it until they expire.
func TestLegacyFingerprintIsStable(t *testing.T) {
	s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(7, smpptest.SubmitFields{Src: "SHOP", Dst: "447700900123", ShortMessage: []byte("Your code is 123456")}))
	if err != nil {
		t.Fatal(err)
	}
	const want = "d73fec6c0dbbb0609229fa0b9b7c3ecc521de3483a3b773b02b38f8c06c523c8"
	if got := s.Fingerprint(); hex.EncodeToString(got[:]) != want {
		t.Errorf("Fingerprint = %x, want %s (the unsalted SHA-256 stored by earlier versions)", got, want)
	}
}

// The keyed fingerprint is the same fields under an HMAC: it depends on
// the key and differs from the plain SHA-256.
func TestKeyedFingerprintDependsOnTheSecret(t *testing.T) {
	s, err := smpp.ParseSubmit(smpptest.EncodeSubmit(7, smpptest.SubmitFields{Src: "SHOP", Dst: "447700900123", ShortMessage: []byte("Your code is 123456")}))
	if err != nil {
		t.Fatal(err)
	}
	g := s.Segment()
	k1 := s.FingerprintWith(g, hmac.New(sha256.New, []byte("secret one")))
	k2 := s.FingerprintWith(g, hmac.New(sha256.New, []byte("secret two")))
	again := s.FingerprintWith(g, hmac.New(sha256.New, []byte("secret one")))
	if k1 == k2 || k1 == s.Fingerprint() || k1 != again {
		t.Errorf("keyed fingerprints %x, %x (again %x), plain %x: want stable per key, different across keys and from the plain hash", k1, k2, again, s.Fingerprint())
	}
}
