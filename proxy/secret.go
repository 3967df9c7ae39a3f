package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/smppproxy/smppproxy/state"
)

// loadSecret returns the install's fingerprint secret, kept in the store
// directory (state.FileSecret) and created on first start; without a store
// path (tests on an injected store) a random one. A secret created next to
// a store that already holds records fingerprinted under a secret means
// the old one was lost: refused (and the new file removed, so the next
// start refuses too), since every retry of those records would be taken
// for a conflict.
func loadSecret(ctx context.Context, path string, st state.Store, log *slog.Logger) (*state.Secret, error) {
	if path == "" {
		return state.RandomSecret()
	}
	s, created, err := state.FileSecret{Dir: path}.LoadOrCreate(ctx)
	if err != nil || !created {
		return s, err
	}
	file := filepath.Join(path, state.SecretFileName)
	keyed := false
	err = st.Scan(ctx, func(r *state.Record) bool {
		keyed = r.FingerprintVersion == state.FingerprintHMAC
		return !keyed
	})
	if err == nil && keyed {
		err = fmt.Errorf("the fingerprint secret %s was missing but the store holds records fingerprinted under one: "+
			"restore that file from the backup of this store (a new secret would answer every retry of those records with a conflict)", file)
	}
	if err != nil {
		_ = os.Remove(file)
		return nil, err
	}
	log.Info("fingerprint secret created", "path", file)
	return s, nil
}
