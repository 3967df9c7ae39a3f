package dedup

import (
	"context"
	"encoding/hex"
	"hash"
	"strings"
	"time"

	"github.com/smppproxy/smppproxy/smpp"
	"github.com/smppproxy/smppproxy/state"
)

// content is what the records of a submit are compared with: its keyed
// fingerprint (state.FingerprintHMAC) and, computed only when a record
// written before the secret is met, its legacy one (state.FingerprintSHA256).
type content struct {
	sub *smpp.Submit
	seg smpp.Segment
	fp  [32]byte
	v1  *[32]byte
}

func (c *content) legacy() [32]byte {
	if c.v1 == nil {
		v := c.sub.FingerprintOf(c.seg)
		c.v1 = &v
	}
	return *c.v1
}

// matches reports whether r was written for this content, by a
// fingerprint of r's own version.
func (c *content) matches(r *state.Record) bool {
	if r.FingerprintVersion == state.FingerprintHMAC {
		return r.Fingerprint == c.fp
	}
	return r.Fingerprint == c.legacy()
}

// prefixFingerprintKey starts a fingerprint-derived key: "fp:" + the hex
// fingerprint, then "/ref<n>" for a part of a long message, and
// "@<created>" for an archived record.
const prefixFingerprintKey = "fp:"

// legacyKey returns the key under which a record written before the
// fingerprint secret — its key embeds the legacy fingerprint — still
// deduplicates this submit (within window), or k. Only versions before the
// secret wrote such records, and a restart makes any left in flight
// unknown, so the caller asks only within a window of the engine's start;
// until then a fingerprint-keyed submit costs one more read.
func (e *Engine) legacyKey(ctx context.Context, k state.Key, c *content, window time.Duration) state.Key {
	rest, ok := strings.CutPrefix(k.Key, prefixFingerprintKey+hex.EncodeToString(c.fp[:]))
	if !ok {
		return k
	}
	v1 := c.legacy()
	old := k
	old.Key = prefixFingerprintKey + hex.EncodeToString(v1[:]) + rest
	r, err := e.cfg.Store.Get(ctx, old)
	if err != nil || (r.State != state.Sent && !e.now().Before(r.Created.Add(window))) {
		return k
	}
	return old
}

// Tag is what operators are shown of a fingerprint: a short tag under the
// install's secret (state.Secret.Tag), never the fingerprint.
func (e *Engine) Tag(fp [32]byte) string { return e.cfg.Secret.Tag(fp) }

// DisplayKey is a stored key as operators see it: the client's key for a
// key-TLV record; for a fingerprint-derived key, the key with its
// fingerprint replaced by its tag (TagKey); other keys as stored.
func (e *Engine) DisplayKey(stored string) string {
	if v, ok := strings.CutPrefix(stored, "k:"); ok {
		return v
	}
	return TagKey(stored, e.Tag)
}

// TaggedKeyPrefix starts a fingerprint-derived key as operators see it
// (TagKey): "fp~" and the fingerprint's tag.
const TaggedKeyPrefix = "fp~"

// TagKey returns a fingerprint-derived stored key ("fp:<64 hex>…") as
// "fp~<tag>…", the fingerprint replaced by tag(fingerprint); any other key
// is returned unchanged.
func TagKey(stored string, tag func([32]byte) string) string {
	rest, ok := strings.CutPrefix(stored, prefixFingerprintKey)
	if !ok || len(rest) < 64 {
		return stored
	}
	b, err := hex.DecodeString(rest[:64])
	if err != nil {
		return stored
	}
	var fp [32]byte
	copy(fp[:], b)
	return TaggedKeyPrefix + tag(fp) + rest[64:]
}

// logKey is a stored key as logs show it: as stored, except that the
// fingerprint a fingerprint key embeds is replaced by its tag.
func (e *Engine) logKey(stored string) string { return TagKey(stored, e.Tag) }

// fingerprint is sub's fingerprint under the install's secret
// (smpp.Submit.FingerprintWith), with an HMAC reused from e.macs: a new
// one per submit costs its key schedule and three allocations.
func (e *Engine) fingerprint(sub *smpp.Submit, seg smpp.Segment) [32]byte {
	h, ok := e.macs.Get().(hash.Hash)
	if !ok {
		h = e.cfg.Secret.MAC()
	}
	h.Reset()
	fp := sub.FingerprintWith(seg, h)
	e.macs.Put(h)
	return fp
}
