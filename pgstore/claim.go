package pgstore

import (
	"context"
	"fmt"

	"time"

	"github.com/smppproxy/smppproxy/state"
)

var _ state.Claimer = (*Store)(nil)

// Claim implements state.Claimer: entry seq of queue is this owner's to
// deliver until until, unless another owner's claim on it is still
// running. Claiming again extends one's own claim. An entry that is gone
// (acknowledged, expired) is not claimed.
func (s *Store) Claim(ctx context.Context, queue string, seq uint64, owner string, until time.Time) (bool, error) {
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	defer s.exit()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `UPDATE queue_entries SET claimed_by = $3, claimed_until_ns = $4
		WHERE queue = $1 AND seq = $2 AND (claimed_by IS NULL OR claimed_by = $3 OR claimed_until_ns <= $5)`,
		col(queue), seqArg(seq), owner, unixNano(until), unixNano(s.now()))
	if err != nil {
		return false, fmt.Errorf("pgstore: claim: %w", wrapErr(err))
	}
	return tag.RowsAffected() == 1, nil
}
