package state

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// marker is a store's identity and high-water mark. The marker file holds
// all of it (JSON); Badger holds the identity under keyMarker and the mark
// under keyHWM (written by every commit, see launch).
type marker struct {
	Format   int       `json:"format"`
	Instance string    `json:"instance"`
	Created  time.Time `json:"created"`
	// Commits is how many commits the store had made by At (the marker
	// file's copy lags Badger's by up to CheckpointInterval).
	Commits uint64    `json:"commits"`
	At      time.Time `json:"at,omitzero"`
}

// Keys of the marker and the high-water mark (next to keyQueueSeq).
const (
	keyMarker = "x/marker"
	keyHWM    = "x/hwm"
)

func newMarker(now time.Time) *marker {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return &marker{Format: markerFormat, Instance: hex.EncodeToString(b[:]), Created: now.UTC()}
}

// readMarkerFile returns the marker file of dir, nil when there is none.
func readMarkerFile(dir string) (*marker, error) {
	b, err := os.ReadFile(filepath.Join(dir, MarkerFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("its marker file cannot be read: %v", err)
	}
	var m marker
	if err := json.Unmarshal(b, &m); err != nil || m.Instance == "" {
		return nil, fmt.Errorf("its marker file %s is damaged", MarkerFile)
	}
	return &m, nil
}

// writeMarkerFile replaces dir's marker file atomically and durably.
func writeMarkerFile(dir string, m marker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := replaceFile(dir, MarkerFile, append(b, '\n')); err != nil {
		return fmt.Errorf("state: write marker: %w", err)
	}
	return nil
}

// replaceFile replaces dir's file name with b atomically and durably: b
// goes to name.tmp, synced, which is renamed over name, and dir synced.
func replaceFile(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	err := writeSynced(tmp, b)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		err = syncDir(dir)
	}
	return err
}

// writeSynced writes b to a new file at path and syncs it.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// encodeHWM encodes the high-water mark of commit number commits, made at
// at, after which the last queue sequence number given is qseq (what a
// replay needs to tell the receipts of commits the commit log lost, see
// repairAhead).
func encodeHWM(commits uint64, at time.Time, qseq uint64) []byte {
	b := binary.AppendUvarint(nil, commits)
	b = binary.AppendVarint(b, at.UnixNano())
	return binary.AppendUvarint(b, qseq)
}

// decodeHWM decodes a high-water mark; hasQ is false in one written
// before it carried the queue sequence number.
func decodeHWM(b []byte) (commits uint64, at time.Time, qseq uint64, hasQ bool, err error) {
	bad := errors.New("state: bad high-water mark")
	commits, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, time.Time{}, 0, false, bad
	}
	ns, m := binary.Varint(b[n:])
	if m <= 0 {
		return 0, time.Time{}, 0, false, bad
	}
	if rest := b[n+m:]; len(rest) > 0 {
		if qseq, m = binary.Uvarint(rest); m <= 0 {
			return 0, time.Time{}, 0, false, bad
		}
		hasQ = true
	}
	return commits, time.Unix(0, ns).UTC(), qseq, hasQ, nil
}

// marks is what Badger holds of the marker when it opens.
type marks struct {
	marker  *marker // nil: no marker
	commits uint64  // high-water mark (0 when none)
	at      time.Time
	empty   bool // no key at all
}

func readMarks(db *badger.DB) (marks, error) {
	var ms marks
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		it.Rewind()
		ms.empty = !it.Valid()
		it.Close()
		if item, err := txn.Get([]byte(keyMarker)); err == nil {
			var m marker
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &m) }); err != nil {
				return fmt.Errorf("state: read marker: %w", err)
			}
			ms.marker = &m
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("state: read marker: %w", err)
		}
		item, err := txn.Get([]byte(keyHWM))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("state: read high-water mark: %w", err)
		}
		return item.Value(func(v []byte) (err error) {
			ms.commits, ms.at, _, _, err = decodeHWM(v)
			return err
		})
	})
	return ms, err
}

// settle decides, once Badger has opened the directory, whether the store
// may start (see marker.go), and writes the marker (Badger and file). It
// returns the marker and the number of commits known lost.
func settle(db *badger.DB, path string, ds dirState, force bool, log *slog.Logger) (*marker, uint64, error) {
	ms, err := readMarks(db)
	if err != nil {
		return nil, 0, err
	}
	file := ds.marker
	if file != nil {
		if n, at, ok := readHWMFile(path, file.Instance); ok && n > file.Commits {
			f := *file
			f.Commits, f.At = n, at
			file = &f
		}
	}
	problems := ds.damage
	var lost uint64
	if file != nil && (ms.marker == nil || ms.marker.Instance == file.Instance) && file.Commits > ms.commits {
		lost = file.Commits - ms.commits
	}

	switch {
	case ms.marker == nil && file != nil:
		problems = append(problems, fmt.Sprintf("its marker file names store %s, which Badger opens without (%d commits lost)", file.Instance, lost))
	case ms.marker == nil && ds.hasData && ms.empty:
		problems = append(problems, "it holds data files but opens empty and without a marker")
	case ms.marker != nil && file != nil && file.Instance != ms.marker.Instance:
		problems = append(problems, fmt.Sprintf("its marker file names store %s but its data is store %s", file.Instance, ms.marker.Instance))
	case lost > 0 && file != nil:
		problems = append(problems, fmt.Sprintf("it opens with %d commits (the last at %s) but had made %d by %s: %d commits (each of one or more writes) were lost with the tail of its write-ahead log",
			ms.commits, ms.at.Format(time.RFC3339), file.Commits, file.At.Format(time.RFC3339), lost))
	}
	lost = max(lost, ds.logLost)
	if len(problems) > 0 && !force {
		return nil, lost, damaged(path, problems)
	}
	m := ms.marker
	now := time.Now()
	switch {
	case len(problems) > 0:
		m = newMarker(now)
		log.Warn("state: store damaged; started anyway (force-empty-store): records in the lost data are gone and their retries will be forwarded again",
			"path", path, "problems", problems, "lost_commits", lost, "instance", m.Instance)
	case m == nil && ds.hasData:
		m = newMarker(now)
		log.Warn("state: store has no marker (written by an older version); marker written", "path", path, "instance", m.Instance)
	case m == nil:
		m = newMarker(now)
		log.Debug("state: new store", "path", path, "instance", m.Instance)
	case file == nil:
		log.Warn("state: store marker file missing; written again", "path", path, "file", MarkerFile)
	}
	if m != ms.marker {
		err := db.Update(func(txn *badger.Txn) error {
			b, err := json.Marshal(marker{Format: m.Format, Instance: m.Instance, Created: m.Created})
			if err != nil {
				return err
			}
			return txn.Set([]byte(keyMarker), b)
		})
		if err == nil {
			err = db.Sync() // Badger may not sync its log itself (CommitLog)
		}
		if err != nil {
			return nil, lost, fmt.Errorf("state: write marker: %w", err)
		}
	}
	m.Commits, m.At = ms.commits, now.UTC()
	if err := writeMarkerFile(path, *m); err != nil {
		return nil, lost, err
	}
	return m, lost, nil
}

// committedNow counts a commit just made: the committer's count, the
// checkpoint's copy, and the HWMFile. It runs on the committer goroutine.
func (s *BadgerStore) committedNow() {
	s.commitSeq++
	s.committed.Store(s.commitSeq)
	if s.hwm == nil {
		return
	}
	err := s.hwm.write(s.commitSeq, time.Now())
	if (err != nil) != s.hwmFailing {
		s.hwmFailing = err != nil
		if err != nil {
			s.log.Error("state: high-water mark file not written; commits lost after a crash may go unnoticed", "file", HWMFile, "err", err)
		} else {
			s.log.Info("state: high-water mark file written again", "file", HWMFile)
		}
	}
}

// checkpoint writes the high-water mark of the commits made so far into
// the marker file. It runs on the checkpoint goroutine, or in Close once
// that goroutine is done.
func (s *BadgerStore) checkpoint() error {
	if s.mark == nil {
		return nil
	}
	n := s.committed.Load()
	if n == s.checkpointed {
		return nil
	}
	m := *s.mark
	m.Commits, m.At = n, time.Now().UTC()
	if err := writeMarkerFile(s.path, m); err != nil {
		return err
	}
	s.checkpointed = n
	return nil
}

// checkpointLoop calls checkpoint (when marker is set) and trims the
// commit log (when there is one) every period until stopCheckpoint is
// closed; it logs a failure once, and again when it recovers.
func (s *BadgerStore) checkpointLoop(every time.Duration, marker bool) {
	defer close(s.checkpointDone)
	t := time.NewTicker(every)
	defer t.Stop()
	failing, trimFailing := false, false
	for {
		select {
		case <-s.stopCheckpoint:
			return
		case <-t.C:
		}
		if s.clog != nil {
			err := s.truncateCommitLog()
			if (err != nil) != trimFailing {
				if err != nil {
					s.log.Error("state: commit log not trimmed; it grows until this recovers", "err", err)
				} else {
					s.log.Info("state: commit log trimmed again")
				}
			}
			trimFailing = err != nil
		}
		if !marker {
			continue
		}
		err := s.checkpoint()
		switch {
		case err != nil && !failing:
			s.log.Error("state: store high-water mark not checkpointed; a loss of records would go unnoticed", "err", err)
		case err == nil && failing:
			s.log.Info("state: store high-water mark checkpointed again")
		}
		failing = err != nil
	}
}

// HWMFile is the name of the file, next to MarkerFile, into which every
// commit writes the store's high-water mark in place (32 bytes, no
// fsync): it survives a process crash (kill -9), so a later open sees
// every commit the process made, where the marker file's copy may be up
// to CheckpointInterval old. After an OS crash or power loss it may be
// stale or torn (then its checksum fails and the marker file's copy is
// used).
const HWMFile = MarkerFile + ".hwm"

// hwmFile is the open HWMFile.
//
//	8 bytes instance tag (the first 8 bytes of the instance id, hex-decoded)
//	8 bytes commits, 8 bytes Unix nanoseconds (big-endian)
//	4 bytes CRC-32 (IEEE) of the 24 bytes before, 4 bytes zero
type hwmFile struct {
	f   *os.File
	tag [8]byte
	buf [32]byte
}

func instanceTag(instance string) (tag [8]byte) {
	b, _ := hex.DecodeString(instance)
	copy(tag[:], b)
	return tag
}

// readHWMFile returns the high-water mark dir's HWMFile holds for
// instance; ok is false when there is none (absent, torn, another store).
func readHWMFile(dir, instance string) (commits uint64, at time.Time, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, HWMFile))
	if err != nil || len(b) < 32 {
		return 0, time.Time{}, false
	}
	tag := instanceTag(instance)
	if !bytes.Equal(b[:8], tag[:]) || crc32.ChecksumIEEE(b[:24]) != binary.BigEndian.Uint32(b[24:28]) {
		return 0, time.Time{}, false
	}
	return binary.BigEndian.Uint64(b[8:16]), time.Unix(0, int64(binary.BigEndian.Uint64(b[16:24]))).UTC(), true
}

func openHWMFile(dir, instance string) (*hwmFile, error) {
	f, err := os.OpenFile(filepath.Join(dir, HWMFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", HWMFile, err)
	}
	return &hwmFile{f: f, tag: instanceTag(instance)}, nil
}

// write records commits made by at. It runs on the committer goroutine
// (or at open, before it starts).
func (h *hwmFile) write(commits uint64, at time.Time) error {
	b := h.buf[:]
	copy(b[:8], h.tag[:])
	binary.BigEndian.PutUint64(b[8:16], commits)
	binary.BigEndian.PutUint64(b[16:24], uint64(at.UnixNano()))
	binary.BigEndian.PutUint32(b[24:28], crc32.ChecksumIEEE(b[:24]))
	_, err := h.f.WriteAt(b, 0)
	return err
}
