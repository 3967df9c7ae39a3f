package pgstore

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/smppproxy/smppproxy/state"
)

var _ state.SecretKeeper = (*Store)(nil)

// LoadOrCreate implements state.SecretKeeper: the fingerprint secret every
// instance sharing the store uses, created (32 random bytes) by the first
// one that asks; concurrent first calls agree on one.
func (s *Store) LoadOrCreate(ctx context.Context) (*state.Secret, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.exit()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var fresh [32]byte
	if _, err := rand.Read(fresh[:]); err != nil {
		return nil, false, fmt.Errorf("pgstore: fingerprint secret: %w", err)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO secret (id, value) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`, fresh[:])
	if err != nil {
		return nil, false, fmt.Errorf("pgstore: fingerprint secret: %w", wrapErr(err))
	}
	var v []byte
	if err := s.pool.QueryRow(ctx, `SELECT value FROM secret WHERE id = 1`).Scan(&v); err != nil {
		return nil, false, fmt.Errorf("pgstore: fingerprint secret: %w", wrapErr(err))
	}
	if len(v) != 32 {
		return nil, false, fmt.Errorf("pgstore: fingerprint secret: %d bytes stored, want 32", len(v))
	}
	var key [32]byte
	copy(key[:], v)
	return state.NewSecret(key), tag.RowsAffected() == 1, nil
}
