package state

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The store's marker files and its high-water mark are read from disk at
// every open, where a crash or a person may have left anything: no content
// may make their readers panic, and a high-water mark read back is the one
// written.
func FuzzReadStoreMarkers(f *testing.F) {
	m := newMarker(time.Unix(1700000000, 0))
	dir := f.TempDir()
	if err := writeMarkerFile(dir, *m); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(dir, MarkerFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, encodeHWM(42, time.Unix(1700000000, 5), 9))
	f.Add([]byte(`{"format":1,"instance":"x"}`), []byte{0xff, 0xff, 0xff})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, file, hwm []byte) {
		dir := t.TempDir()
		for _, name := range []string{MarkerFile, HWMFile} {
			if err := os.WriteFile(filepath.Join(dir, name), file, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := readMarkerFile(dir); err == nil && got.Instance == "" {
			t.Fatalf("readMarkerFile accepted a marker without an instance: %+v", got)
		}
		_, _, _ = readHWMFile(dir, m.Instance)
		if c, at, q, _, err := decodeHWM(hwm); err == nil {
			back, bat, bq, hasQ, err := decodeHWM(encodeHWM(c, at, q))
			if err != nil || back != c || !bat.Equal(at) || bq != q || !hasQ {
				t.Fatalf("decodeHWM(encodeHWM(%d, %v, %d)) = %d, %v, %d, %v", c, at, q, back, bat, bq, err)
			}
		}
	})
}
