package state

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// Secret is the per-install key of the fingerprint HMAC (SPEC §11): with
// it a record's fingerprint cannot be matched by hashing candidate
// messages (the 10^6 codes of a 6-digit OTP, say). It never leaves the
// process: String, GoString, LogValue and MarshalJSON hide it.
type Secret struct {
	key [32]byte
}

// NewSecret returns a Secret with key b.
func NewSecret(b [32]byte) *Secret { return &Secret{key: b} }

// RandomSecret returns a new Secret of 32 random bytes.
func RandomSecret() (*Secret, error) {
	s := &Secret{}
	if _, err := rand.Read(s.key[:]); err != nil {
		return nil, fmt.Errorf("state: fingerprint secret: %w", err)
	}
	return s, nil
}

// MAC returns a new HMAC-SHA256 under the secret: the hash of the
// version-2 fingerprint (smpp.Submit.FingerprintWith).
func (s *Secret) MAC() hash.Hash { return hmac.New(sha256.New, s.key[:]) }

// Tag is what operators are shown of a fingerprint (or of the fingerprint
// a key embeds): the first 8 hex digits of HMAC(secret, "tag" || fp). It
// tells two records apart; it cannot be matched against the hash of a
// candidate message without the secret, and it is not the fingerprint.
func (s *Secret) Tag(fp [32]byte) string {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte("tag"))
	m.Write(fp[:])
	return hex.EncodeToString(m.Sum(nil)[:4])
}

func (s *Secret) String() string               { return "[fingerprint secret]" }
func (s *Secret) GoString() string             { return "[fingerprint secret]" }
func (s *Secret) LogValue() slog.Value         { return slog.StringValue("[fingerprint secret]") }
func (s *Secret) MarshalJSON() ([]byte, error) { return []byte(`"[fingerprint secret]"`), nil }

// SecretKeeper keeps an install's fingerprint secret. FileSecret keeps it
// in the store directory; a store shared by several instances keeps it in
// its database, so that every instance computes the same fingerprints.
type SecretKeeper interface {
	// LoadOrCreate returns the secret, creating it on first use
	// (created=true) and durably before returning.
	LoadOrCreate(ctx context.Context) (s *Secret, created bool, err error)
}

// SecretFileName is the file FileSecret keeps the secret in.
const SecretFileName = "fingerprint.secret"

// FileSecret keeps the secret in Dir/SecretFileName: 32 random bytes, mode
// 0600, created on first start. Losing the file makes every retry of a
// record written since a conflict; it belongs in the same backup as the
// store.
type FileSecret struct {
	Dir string
}

var _ SecretKeeper = FileSecret{}

// LoadOrCreate implements SecretKeeper. The file is created complete or
// not at all (written to a temporary file, synced, then linked into
// place), and two processes racing on one directory get the same secret.
func (f FileSecret) LoadOrCreate(_ context.Context) (*Secret, bool, error) {
	path := filepath.Join(f.Dir, SecretFileName)
	if s, err := readSecret(path); !errors.Is(err, fs.ErrNotExist) {
		return s, false, err
	}
	s, err := RandomSecret()
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("state: fingerprint secret: %w", err)
	}
	tmp, err := os.CreateTemp(f.Dir, SecretFileName+".tmp*")
	if err != nil {
		return nil, false, fmt.Errorf("state: fingerprint secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(s.key[:])
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: fingerprint secret: write %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		s, err := readSecret(path) // another process created it first
		return s, false, err
	} else if err != nil {
		return nil, false, fmt.Errorf("state: fingerprint secret: %w", err)
	}
	if err := syncDir(f.Dir); err != nil {
		return nil, false, fmt.Errorf("state: fingerprint secret: %w", err)
	}
	return s, true, nil
}

func readSecret(path string) (*Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("state: fingerprint secret: %w", err)
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("state: fingerprint secret %s holds %d bytes, not 32: damaged; restore it from the backup of this store (a new secret would turn every retry of a stored record into a conflict)", path, len(b))
	}
	s := &Secret{}
	copy(s.key[:], b)
	return s, nil
}
