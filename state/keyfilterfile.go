package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/bits-and-blooms/bloom/v3"
)

// KeyFilterFile is the file in a Badger store directory that carries the
// filter of keys held (keyfilter.go) from a clean close to the next open,
// so that a restart does not scan every key the store holds before its
// lookups of fresh keys stop searching Badger (with a million keys the
// two passes of a build took ~2.3 s of CPU while the proxy served).
//
// The filter must never miss a key the store holds: a retry whose record
// the filter says absent would be forwarded again. So the file is used
// only when it is whole (its checksum), holds its probe keys
// (keyFilterProbes), names this store (the marker's instance) and the
// exact number of commits the store opened with: every
// write of a key is a commit, so a store written after the file was made
// (by any version, or by this one after a crash) has a higher count. It is
// removed at open, used or not, before any write, so a store that later
// stops without a clean close has none; and it is written at Close only,
// after the committer's last batch, from the filter that batch updated.
// Writes made at open outside the committer delete keys (repair) or write
// keys the filter does not cover; a commit-log batch replayed at open was
// a commit, counted in the file's number when the filter saw it.
const KeyFilterFile = "keyfilter"

// keyFilterMagic starts the file (the format's version is its last digit).
const keyFilterMagic = "smppproxy keyfilter 2\n"

// maxKeyFilterFile bounds the file read at open: a filter sized for 800
// million keys (9.6 bits each) is ~1 GB; larger is not this store's.
const maxKeyFilterFile = 1 << 30

// keyFilterProbes is how many probe keys a saved filter holds: added at
// save, each must be found at load, so that a filter whose keys a build
// of the Bloom filter library with other hashing would look for
// elsewhere (an upgrade between the save and the load) is not used.
// With ~7 hashes per key in a filter at most half full, a probe is found
// by chance under other hashing at most once in 128; all of them, once in
// 2^56. No record key or marker begins with the probes' NUL.
const keyFilterProbes = 8

func keyFilterProbe(i int) []byte { return fmt.Appendf(nil, "\x00keyfilter-probe-%d", i) }

// savedKeyFilter is the content of KeyFilterFile.
type savedKeyFilter struct {
	instance string // the store's marker instance
	commits  uint64 // the store's commits when the filter was saved
	room, n  uint64 // keyFilter.room and keyFilter.n
	filter   *bloom.BloomFilter
}

// encode is the file's bytes: magic, instance (length-prefixed), commits,
// room, n, the filter (bloom's own encoding), then a CRC-32C of all that.
func (k savedKeyFilter) encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(keyFilterMagic)
	b.Write(binary.BigEndian.AppendUint16(nil, uint16(len(k.instance))))
	b.WriteString(k.instance)
	for _, v := range []uint64{k.commits, k.room, k.n} {
		b.Write(binary.BigEndian.AppendUint64(nil, v))
	}
	if _, err := k.filter.WriteTo(&b); err != nil {
		return nil, err
	}
	return binary.BigEndian.AppendUint32(b.Bytes(), crc32.Checksum(b.Bytes(), castagnoli)), nil
}

var errKeyFilterFile = errors.New("not a whole filter file")

// decodeKeyFilter reads what encode wrote; any other content is an error.
func decodeKeyFilter(b []byte) (savedKeyFilter, error) {
	var k savedKeyFilter
	if len(b) < len(keyFilterMagic)+2+24+4 || string(b[:len(keyFilterMagic)]) != keyFilterMagic {
		return k, errKeyFilterFile
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return k, fmt.Errorf("%w: checksum", errKeyFilterFile)
	}
	rest := body[len(keyFilterMagic):]
	il := int(binary.BigEndian.Uint16(rest))
	if len(rest) < 2+il+24 {
		return k, errKeyFilterFile
	}
	k.instance = string(rest[2 : 2+il])
	rest = rest[2+il:]
	k.commits, k.room, k.n = binary.BigEndian.Uint64(rest), binary.BigEndian.Uint64(rest[8:]), binary.BigEndian.Uint64(rest[16:])
	rest = rest[24:]
	// bloom's decoder allocates what the encoding's lengths say: check
	// them against the bytes there are first.
	if len(rest) < 24 {
		return k, errKeyFilterFile
	}
	m, kk, bits := binary.BigEndian.Uint64(rest), binary.BigEndian.Uint64(rest[8:]), binary.BigEndian.Uint64(rest[16:])
	if kk == 0 || kk > 64 || m == 0 || bits != m || m > 8*maxKeyFilterFile || uint64(len(rest)-24) != 8*((m+63)/64) || k.room == 0 {
		return k, fmt.Errorf("%w: filter of %d bits, %d hashes, %d bytes", errKeyFilterFile, m, kk, len(rest)-24)
	}
	k.filter = &bloom.BloomFilter{}
	if _, err := k.filter.ReadFrom(bytes.NewReader(rest)); err != nil {
		return k, fmt.Errorf("%w: %v", errKeyFilterFile, err)
	}
	return k, nil
}

// saveKeyFilter writes the filter f holds to dir's KeyFilterFile for a
// store of instance with commits commits: a temporary file, synced, then
// renamed over it and the directory synced. Nothing is written while no
// build has finished.
func saveKeyFilter(dir, instance string, commits uint64, f *keyFilter) error {
	f.mu.Lock()
	k := savedKeyFilter{instance: instance, commits: commits, room: uint64(f.room), n: uint64(f.n), filter: f.cur}
	var b []byte
	var err error
	if k.filter != nil {
		for i := range keyFilterProbes {
			k.filter.Add(keyFilterProbe(i))
		}
		b, err = k.encode()
	}
	f.mu.Unlock()
	if k.filter == nil || err != nil {
		return err
	}
	if err := replaceFile(dir, KeyFilterFile, b); err != nil {
		_ = os.Remove(filepath.Join(dir, KeyFilterFile+".tmp"))
		return err
	}
	return nil
}

// takeKeyFilter reads and removes dir's KeyFilterFile (and any temporary
// one a crash left). It returns the filter when the file is whole and was
// saved for this store at exactly commits commits, and was removed; why
// not otherwise (nil when there was no file).
func takeKeyFilter(dir, instance string, commits uint64) (*savedKeyFilter, error) {
	_ = os.Remove(filepath.Join(dir, KeyFilterFile+".tmp"))
	path := filepath.Join(dir, KeyFilterFile)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var b []byte
	if st.Size() <= maxKeyFilterFile {
		b, err = os.ReadFile(path)
	}
	// Removed before anything is written, used or not: a later crash
	// leaves no file (the count would refuse it anyway).
	if rmErr := os.Remove(path); rmErr != nil {
		return nil, fmt.Errorf("not removed: %w", rmErr)
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("its removal not synced: %w", err)
	}
	switch {
	case err != nil:
		return nil, err
	case b == nil:
		return nil, fmt.Errorf("%w: %d bytes", errKeyFilterFile, st.Size())
	}
	k, err := decodeKeyFilter(b)
	switch {
	case err != nil:
		return nil, err
	case k.instance != instance:
		return nil, fmt.Errorf("saved for store %s, not this one", k.instance)
	case k.commits != commits:
		return nil, fmt.Errorf("saved at %d commits, the store has %d", k.commits, commits)
	}
	for i := range keyFilterProbes {
		if !k.filter.Test(keyFilterProbe(i)) {
			return nil, errors.New("its probe keys are not found: saved by a build that hashes keys otherwise")
		}
	}
	return &k, nil
}
