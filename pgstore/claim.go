package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/smppproxy/smppproxy/state"
)

var _ state.Claimer = (*Store)(nil)

// sqlNowNS is the database's clock in Unix nanoseconds (to the
// microsecond): what claims on queued entries are compared with.
const sqlNowNS = `(extract(epoch FROM now()) * 1000000)::int8 * 1000`

// sqlClaim claims, of entries $2 of queue $1, those on which no other
// owner's claim is still running, for owner $3 for $4 ns, in one
// statement. Claims run on the database's clock (sqlNowNS), the one every
// instance compares them with. An entry that another transaction holds
// locked at that moment (being claimed, acknowledged or swept) is skipped
// rather than waited for: it is not claimed now, and the caller lists it
// again later.
// The claim condition is checked again on the latest version of each row
// it locks, so two claimers never both get an entry.
const sqlClaim = `WITH c AS (
		SELECT seq FROM queue_entries
		WHERE queue = $1 AND seq = ANY($2::int8[])
			AND (claimed_by IS NULL OR claimed_by = $3 OR claimed_until_ns <= ` + sqlNowNS + `)
		ORDER BY seq
		FOR UPDATE SKIP LOCKED)
	UPDATE queue_entries q SET claimed_by = $3, claimed_until_ns = ` + sqlNowNS + ` + $4::int8
	FROM c WHERE q.seq = c.seq
	RETURNING q.seq`

// claimOwner is how owner's claims are written: with this process's token
// (its claim on the instance row), so that a process still running under
// an instance id another process has taken over (its lease lapsed while
// the database was out of its reach) takes none of the other's claims
// for its own, and the two never deliver the same entry at once (from
// review).
func (s *Store) claimOwner(owner string) string { return owner + "/" + s.token }

// ListClaimable implements state.Claimer: List, less the entries on which
// another owner's claim is still running.
func (s *Store) ListClaimable(ctx context.Context, queue string, after uint64, limit int, owner string) ([]*state.QueueEntry, error) {
	return s.list(ctx, queue, after, limit, &owner)
}

// Claim implements state.Claimer, in one statement: the entries seqs of
// queue are this owner's to deliver until until, unless another owner's
// claim on one is still running. Claiming again extends one's own claim.
// The claim lasts until - now on the database's clock, so the instances'
// clocks need not agree.
// An entry that is gone (acknowledged, expired), or locked by another
// transaction at that moment, is not claimed. It returns the seqs
// claimed, in order.
func (s *Store) Claim(ctx context.Context, queue string, seqs []uint64, owner string, until time.Time) ([]uint64, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	if len(seqs) == 0 {
		return nil, nil
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	args := make([]int64, len(seqs))
	for i, seq := range seqs {
		args[i] = seqArg(seq)
	}
	rows, err := s.pool.Query(ctx, sqlClaim, col(queue), args, s.claimOwner(owner), int64(max(until.Sub(s.now()), 0)))
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", wrapErr(err))
	}
	defer rows.Close()
	var got []uint64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, fmt.Errorf("pgstore: claim: %w", wrapErr(err))
		}
		got = append(got, uint64(seq))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", wrapErr(err))
	}
	slices.Sort(got)
	return got, nil
}
