package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/smppproxy/smppproxy/state"
)

// loadSecret returns the install's fingerprint secret from keeper, created
// on first start; without a keeper a random one (tests on an injected
// store without a path). A secret created next to a store that already
// holds records fingerprinted under a secret means the old one was lost:
// refused (a new FileSecret file is removed again, so the next start
// refuses too), since every retry of those records would be taken for a
// conflict.
func loadSecret(ctx context.Context, keeper state.SecretKeeper, st state.Store, log *slog.Logger) (*state.Secret, error) {
	if keeper == nil {
		return state.RandomSecret()
	}
	s, created, err := keeper.LoadOrCreate(ctx)
	if err != nil || !created {
		return s, err
	}
	what, file := "the fingerprint secret", ""
	if fk, ok := keeper.(state.FileSecret); ok {
		file = filepath.Join(fk.Dir, state.SecretFileName)
		what += " " + file
	}
	keyed := false
	err = st.Scan(ctx, func(r *state.Record) bool {
		keyed = r.FingerprintVersion == state.FingerprintHMAC
		return !keyed
	})
	if err == nil && keyed {
		err = fmt.Errorf("%s was missing but the store holds records fingerprinted under one: "+
			"restore it from the backup of this store (a new secret would answer every retry of those records with a conflict)", what)
	}
	if err != nil {
		if file != "" {
			_ = os.Remove(file)
		}
		return nil, err
	}
	log.Info("fingerprint secret created", "where", what)
	return s, nil
}
