package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// While WriteFunc writes, the only new entry in the directory is a
// temporary file that IsLeftover recognises (what a killed write leaves);
// a failed write leaves nothing, and a good one only the file, with its
// mode.
func TestWriteFuncLeavesOnlyWhatIsLeftoverCanTell(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snapshot.db")
	var during []string
	err := WriteFunc(path, 0o600, func(w io.Writer) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			during = append(during, e.Name())
		}
		_, err = w.Write([]byte("content"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || !IsLeftover(during[0]) {
		t.Errorf("during the write the directory held %q, want one temporary file IsLeftover recognises", during)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 || info.Size() != int64(len("content")) {
		t.Errorf("written: %v, %v", info, err)
	}
	for _, name := range []string{"snapshot.db", "notes.txt", ".hidden", "tmp-1"} {
		if IsLeftover(name) {
			t.Errorf("IsLeftover(%q) = true", name)
		}
	}

	failed := filepath.Join(dir, "failed.db")
	if err := WriteFunc(failed, 0o600, func(io.Writer) error { return errors.New("cut short") }); err == nil {
		t.Fatal("a failed write returned no error")
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("after a failed write the directory holds %v (%v), want only snapshot.db", entries, err)
	}
}
