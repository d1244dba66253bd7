package etcd

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
)

// The gateway's stream is what etcd 3.4 sends for /v3/maintenance/snapshot
// (checked against the real one in snapshot_e2e_test.go): JSON chunks of
// base64 blobs, the database first and its SHA-256 last. No etcd sends a
// damaged stream on demand, so these are made here.

// snapshotStream is a stream of db and its hash in chunks of size.
func snapshotStream(t *testing.T, db []byte, size int) []byte {
	t.Helper()
	sum := sha256.Sum256(db)
	whole := append(slices.Clone(db), sum[:]...)
	var out bytes.Buffer
	for len(whole) > 0 {
		n := min(size, len(whole))
		line, err := json.Marshal(map[string]any{"result": map[string]any{"blob": whole[:n]}})
		if err != nil {
			t.Fatal(err)
		}
		out.Write(append(line, '\n'))
		whole = whole[n:]
	}
	return out.Bytes()
}

func randomDB(t *testing.T, pages int) []byte {
	t.Helper()
	db := make([]byte, pages*4096)
	if _, err := rand.Read(db); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestCopySnapshotChecksTheStream(t *testing.T) {
	db := randomDB(t, 5)
	good := snapshotStream(t, db, 3000)

	var out bytes.Buffer
	n, err := copySnapshot(&out, bytes.NewReader(good), 1<<20)
	if err != nil || n != int64(len(db)+sha256.Size) || !bytes.Equal(out.Bytes()[:len(db)], db) {
		t.Fatalf("a good stream: %d bytes, %v", n, err)
	}

	lines := strings.SplitAfter(string(good), "\n")
	// The database with one bit flipped, and the good database's hash.
	flipped := slices.Clone(db)
	flipped[len(db)/2] ^= 1
	sum := sha256.Sum256(db)
	damaged := mustLine(t, flipped) + mustLine(t, sum[:])

	for _, tc := range []struct {
		name, stream, want string
		limit              int64
	}{
		{"damaged on the way", damaged, "does not match", 1 << 20},
		{"cut short", strings.Join(lines[:len(lines)-3], ""), "not an etcd snapshot", 1 << 20},
		{"cut inside a chunk", string(good[:len(good)/2]), "snapshot stream after", 1 << 20},
		{"no hash at all", mustLine(t, db), "not an etcd snapshot", 1 << 20},
		{"empty", "", "not an etcd snapshot", 1 << 20},
		{"an error from etcd", lines[0] + `{"error":{"grpc_code":14,"code":14,"message":"etcdserver: request timed out"}}` + "\n", "request timed out", 1 << 20},
		{"neither result nor error", `{"header":{}}` + "\n", "neither result nor error", 1 << 20},
		{"not JSON", "<html>", "snapshot stream after", 1 << 20},
		{"larger than the room", string(good), "larger than", 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := copySnapshot(&bytes.Buffer{}, strings.NewReader(tc.stream), tc.limit)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func mustLine(t *testing.T, blob []byte) string {
	t.Helper()
	line, err := json.Marshal(map[string]any{"result": map[string]any{"blob": blob}})
	if err != nil {
		t.Fatal(err)
	}
	return string(line) + "\n"
}

func TestSnapshotDue(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) snapshotFile { return snapshotFile{taken: now.Add(d)} }
	for _, tc := range []struct {
		name  string
		files []snapshotFile
		due   bool
	}{
		{"none yet", nil, true},
		{"newest an hour old", []snapshotFile{at(-30 * time.Hour), at(-time.Hour)}, false},
		{"newest just under the interval", []snapshotFile{at(-12*time.Hour + time.Second)}, false},
		{"newest the interval old", []snapshotFile{at(-12 * time.Hour)}, true},
		{"one from the future, the rest old", []snapshotFile{at(-13 * time.Hour), at(5 * time.Hour)}, true},
		{"one from the future, one recent", []snapshotFile{at(-time.Hour), at(5 * time.Hour)}, false},
	} {
		if got := snapshotDue(tc.files, now, 12*time.Hour); got != tc.due {
			t.Errorf("%s: due %v, want %v", tc.name, got, tc.due)
		}
	}
}

func TestListSnapshotsTakesOnlyItsOwn(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{
		"snapshot-20261129T120000Z.db", "snapshot-20261128T120000Z.db", // complete, out of order
		".snapshot-20261129T130000Z.db.tmp-12345",       // a write killed before its rename
		"snapshot-yesterday.db", "notes.txt", ".hidden", // not the component's
	} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "snapshot-20261127T120000Z.db"), 0o700); err != nil {
		t.Fatal(err)
	}
	files, leftovers, err := listSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.name)
	}
	if want := []string{"snapshot-20261128T120000Z.db", "snapshot-20261129T120000Z.db"}; !slices.Equal(names, want) {
		t.Errorf("snapshots %q, want %q (oldest first; a directory is none)", names, want)
	}
	if want := []string{".snapshot-20261129T130000Z.db.tmp-12345"}; !slices.Equal(leftovers, want) {
		t.Errorf("leftovers %q, want %q", leftovers, want)
	}
	if files, leftovers, err := listSnapshots(filepath.Join(dir, "missing")); err != nil || files != nil || leftovers != nil {
		t.Errorf("a missing directory: %v %v %v", files, leftovers, err)
	}
	if _, _, err := listSnapshots(filepath.Join(dir, "notes.txt")); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file for a directory: %v", err)
	}
}

func TestANewSnapshotUnderAnExistingNameCountsOnce(t *testing.T) {
	day := func(d int) snapshotFile {
		taken := time.Date(2026, 11, d, 12, 0, 0, 0, time.UTC)
		return snapshotFile{name: etcdsnapshot.Name(taken), taken: taken}
	}
	var names []string
	// The clock was set back to the second of the 27th's snapshot.
	for _, f := range withSnapshot([]snapshotFile{day(26), day(27), day(28)}, day(27)) {
		names = append(names, f.name)
	}
	if want := []string{day(26).name, day(27).name, day(28).name}; !slices.Equal(names, want) {
		t.Errorf("snapshots %q, want %q", names, want)
	}
	names = nil
	for _, f := range withSnapshot([]snapshotFile{day(28), day(29)}, day(27)) {
		names = append(names, f.name)
	}
	if want := []string{day(27).name, day(28).name, day(29).name}; !slices.Equal(names, want) {
		t.Errorf("snapshots %q, want %q (oldest first)", names, want)
	}
}
