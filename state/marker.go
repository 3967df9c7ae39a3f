package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// A Badger store must never start empty, or with records missing, by
// accident: a retry whose record is gone is forwarded again (SPEC §3).
// Three things guard it.
//
//   - Before Badger opens the directory (inspectDir), its files are
//     checked against its MANIFEST: Badger deletes every table file its
//     MANIFEST does not list, so a missing or cut-short MANIFEST would
//     silently empty the store, and a cut-short table file makes Badger
//     panic in a goroutine of its own (unrecoverable). Either is refused.
//   - A marker (the store's instance id and format) lives both in Badger
//     (key x/marker) and in a file next to it (MarkerFile). A directory
//     whose marker file names a store that Badger opens without, or that
//     holds data files but opens empty and unmarked, is refused.
//   - A high-water mark: every commit also writes x/hwm, the number of
//     commits the store has made and when, and then writes the same
//     count in place into HWMFile (no fsync: it survives a process
//     crash). The marker file is rewritten with it, synced, every
//     CheckpointInterval (and on Close). A store that opens with fewer
//     commits than those files recorded lost the tail of its write-ahead
//     log: refused, saying how many commits are missing. After a process
//     crash (kill -9) every lost commit is seen; after an OS crash or a
//     power loss, HWMFile may be stale and commits made in the last
//     CheckpointInterval before it are not covered.
//
// The commit log (commitlog.go) is replayed into Badger before the
// marker and the high-water mark are read: its batches count as present
// (each carries its commit's high-water mark). A log that starts after
// the commits Badger holds, or whose older segment is damaged, lost
// commits: refused the same way.
//
// ForceEmpty skips the refusals: a damaged MANIFEST or table is moved,
// with every table, into damaged-<time> inside the directory (quarantine;
// kept for an investigation or a restore) and Badger starts from what is
// left; a fresh marker is written and the commits known lost are
// reported in BadgerStats.LostCommits.

// ErrStoreDamaged: the store directory lost data (or cannot be read) and
// OpenBadger refused to start on it. The error text says what was found.
var ErrStoreDamaged = errors.New("state: store damaged")

// MarkerFile is the name of the marker file in a Badger store directory.
const MarkerFile = "SMPPPROXY-STORE"

// markerFormat is the store format the marker records.
const markerFormat = 1

// damageAdvice ends every ErrStoreDamaged: what the operator can do.
const damageAdvice = "starting on it would forward again every retry of a submit recorded in the lost data. " +
	"Restore the directory from a backup, or, after reading the README (store damage), start deliberately " +
	"with what is left (possibly nothing) with `smppproxy serve --force-empty-store`"

func damaged(path string, problems []string) error {
	return fmt.Errorf("%w: %s: %s; %s", ErrStoreDamaged, path, strings.Join(problems, "; "), damageAdvice)
}

// dirState is what inspectDir found before Badger opened the directory.
type dirState struct {
	hasData bool    // a MANIFEST, table, value log or memtable log is there
	marker  *marker // the marker file; nil when absent
	damage  []string
	// tables: the MANIFEST or a table it lists is damaged (Badger could
	// not open the directory safely as it is).
	tables bool
	// unlisted: table files the MANIFEST does not list.
	unlisted []string
	// logLost: commits found missing by the commit log's replay (its
	// problems are in damage).
	logLost uint64
}

// inspectDir checks a store directory before Badger opens it (see the
// comment at the top of this file). A missing directory is a new store.
func inspectDir(path string, bo badger.Options) (dirState, error) {
	var ds dirState
	ents, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return ds, nil
	}
	if err != nil {
		return ds, fmt.Errorf("state: read store directory: %w", err)
	}
	tables := map[uint64]bool{}
	manifest := false
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == badger.ManifestFilename:
			manifest, ds.hasData = true, true
		case strings.HasSuffix(name, ".sst"):
			if id, ok := table.ParseFileID(name); ok {
				tables[id] = true
			}
			ds.hasData = true
		case strings.HasSuffix(name, ".vlog"), strings.HasSuffix(name, ".mem"):
			ds.hasData = true
		default:
			if _, _, _, ok := parseCommitLogName(name); ok {
				ds.hasData = true
			}
		}
	}
	if ds.marker, err = readMarkerFile(path); err != nil {
		ds.damage = append(ds.damage, err.Error())
	}
	switch {
	case !ds.hasData:
	case !manifest:
		ds.damage = append(ds.damage, fmt.Sprintf("its MANIFEST is missing (%d table files it would list are there; Badger would delete them)", len(tables)))
		ds.tables = true
	default:
		d, unlisted := checkManifest(path, tables, bo)
		ds.damage = append(ds.damage, d...)
		ds.tables = len(d) > len(unlisted)
		ds.unlisted = unlisted
	}
	return ds, nil
}

// quarantineFiles returns the files a forced start moves aside: the
// MANIFEST and every table when the MANIFEST or a table it lists is
// damaged (Badger then starts from its memtable logs alone), else only
// the tables the MANIFEST does not list (Badger would delete them).
func (ds dirState) quarantineFiles(path string) ([]string, error) {
	if !ds.tables {
		return ds.unlisted, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("state: quarantine damaged files: %w", err)
	}
	var names []string
	for _, e := range ents {
		if name := e.Name(); name == badger.ManifestFilename || strings.HasSuffix(name, ".sst") {
			names = append(names, name)
		}
	}
	return names, nil
}

// quarantine moves the files names of the store in path into a new
// directory damaged-<time> inside it, so that a forced start (ForceEmpty)
// neither deletes them nor makes Badger panic on them. It returns the
// directory's path.
func quarantine(path string, names []string, now time.Time) (string, error) {
	dst := filepath.Join(path, "damaged-"+now.UTC().Format("20060102T150405.000000000Z"))
	if err := os.Mkdir(dst, 0o700); err != nil {
		return "", fmt.Errorf("state: quarantine damaged files: %w", err)
	}
	for _, name := range names {
		if err := os.Rename(filepath.Join(path, name), filepath.Join(dst, name)); err != nil {
			return "", fmt.Errorf("state: quarantine damaged files: %w", err)
		}
	}
	if err := syncDir(path); err != nil {
		return "", fmt.Errorf("state: quarantine damaged files: %w", err)
	}
	return dst, nil
}

// checkManifest compares the MANIFEST with the table files present and
// checks that each listed table can be opened.
// The second result lists the table files the MANIFEST does not list
// (each also described in the first).
func checkManifest(path string, present map[uint64]bool, bo badger.Options) (damage, unlisted []string) {
	fp, err := os.Open(filepath.Join(path, badger.ManifestFilename))
	if err != nil {
		return []string{fmt.Sprintf("its MANIFEST cannot be read: %v", err)}, nil
	}
	defer fp.Close()
	fi, err := fp.Stat()
	if err != nil {
		return []string{fmt.Sprintf("its MANIFEST cannot be read: %v", err)}, nil
	}
	mf, end, err := badger.ReplayManifestFile(fp, bo.ExternalMagicVersion, bo)
	if err != nil {
		return []string{fmt.Sprintf("its MANIFEST is damaged: %v", err)}, nil
	}
	if end < fi.Size() {
		damage = append(damage, fmt.Sprintf("its MANIFEST is cut short (%d of %d bytes readable)", end, fi.Size()))
	}
	for id, tm := range mf.Tables {
		name := table.IDToFilename(id)
		if !present[id] {
			damage = append(damage, fmt.Sprintf("table %s listed in its MANIFEST is missing", name))
			continue
		}
		if err := checkTable(filepath.Join(path, name), tm.Compression, bo.BlockSize); err != nil {
			damage = append(damage, fmt.Sprintf("table %s is damaged: %v", name, err))
		}
	}
	for id := range present {
		if _, ok := mf.Tables[id]; !ok {
			name := table.IDToFilename(id)
			unlisted = append(unlisted, name)
			damage = append(damage, fmt.Sprintf("table %s is not listed in its MANIFEST (left by a crash during a compaction, harmless, "+
				"or by a MANIFEST cut short, and then it holds records; Badger would delete it; a forced start moves it aside)", name))
		}
	}
	return damage, unlisted
}

// checkTable opens a table file the way Badger does (its index and
// bounds, not every block) and turns Badger's panic on a damaged one into
// an error: Badger opens tables in goroutines of its own, where a panic
// cannot be recovered.
func checkTable(path string, c options.CompressionType, blockSize int) (err error) {
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("unreadable (cut short or overwritten)")
		}
		_ = mf.Close(-1)
	}()
	_, err = table.OpenTable(mf, table.Options{ReadOnly: true, Compression: c, BlockSize: blockSize})
	return err
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
