package backup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Rotate keeps the newest backups by their names, removes the rest and
// what a killed backup left a day ago, and touches nothing else: not an
// operator's file, not a backup another run is writing now.
func TestRotateKeepsTheNewestAndNothingElseGoes(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	var names []string
	for i := range 4 {
		names = append(names, RotatedName(now.Add(-time.Duration(i)*24*time.Hour)))
	}
	old := "." + names[3] + ".tmp-1234"     // a backup killed three days ago
	writing := "." + names[0] + ".tmp-5678" // a backup being written
	others := []string{"notes.txt", "harmony-controller-latest.backup", ".harmony-controller.tmp-9"}
	for _, name := range append(append(slices.Clone(names), old, writing), others...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(filepath.Join(dir, old), now.Add(-72*time.Hour), now.Add(-72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, writing), now, now); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, RotatedName(now.Add(-time.Hour*24*9))), 0o700); err != nil {
		t.Fatal(err) // a directory of that name is not a backup
	}

	removed, err := Rotate(dir, 2, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{old, names[3], names[2]}; !slices.Equal(removed, want) {
		t.Fatalf("removed %q, want %q", removed, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2+1+len(others)+1 {
		t.Fatalf("left %v", entries)
	}
	for _, name := range append([]string{names[0], names[1], writing}, others...) {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := Rotate(dir, 0, now); err == nil {
		t.Fatal("keeping no backup was taken")
	}
}
