package admin

import (
	"context"
	"strings"

	"github.com/smppproxy/smppproxy/dedup"
	"github.com/smppproxy/smppproxy/state"
)

// Tagger turns a fingerprint into the short tag the API shows instead of
// it (*dedup.Engine, by the install's secret).
type Tagger interface {
	Tag(fp [32]byte) string
}

// tagger is cfg's Tagger, else the Resolver when it is one, else a random
// secret's.
func tagger(cfg Config) Tagger {
	if cfg.Tagger != nil {
		return cfg.Tagger
	}
	if t, ok := cfg.Resolver.(Tagger); ok {
		return t
	}
	s, err := state.RandomSecret()
	if err != nil {
		return hiddenTags{}
	}
	return s
}

// hiddenTags shows no tag at all.
type hiddenTags struct{}

func (hiddenTags) Tag([32]byte) string { return "--------" }

// storedKeysOf returns the stored keys an operator's KEY may mean for
// account: those of storedKeys or, for a fingerprint key as the API shows
// it ("fp~<tag>…"), the stored keys of the account's records shown so,
// found by a scan bounded by ScanCap.
func (h *handler) storedKeysOf(ctx context.Context, account, key string) ([]string, error) {
	if !strings.HasPrefix(key, dedup.TaggedKeyPrefix) {
		return storedKeys(key), nil
	}
	var out []string
	seen := map[string]bool{}
	visited := 0
	err := h.cfg.Store.Scan(ctx, func(r *state.Record) bool {
		if visited++; visited > h.cfg.ScanCap {
			return false
		}
		if r.Key.Account == account && !seen[r.Key.Key] && dedup.TagKey(r.Key.Key, h.tag.Tag) == key {
			seen[r.Key.Key] = true
			out = append(out, r.Key.Key)
		}
		return true
	})
	return out, err
}
