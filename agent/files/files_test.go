package files

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The debt comes before the change: owe runs once the candidate is
// accepted and while path still holds the old content, so an agent that
// dies at any point leaves either the old file or the new file with its
// reload owed. A refused candidate or an unchanged file owes nothing.
func TestWriteOwingOwesBeforeTheFileChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daemon.conf")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	owed := 0
	owe := func() error {
		owed++
		if data, _ := os.ReadFile(path); string(data) != "old\n" {
			t.Errorf("owe ran after the file changed: it holds %q", data)
		}
		return nil
	}
	refuse := func(string) error { return errors.New("no") }
	if changed, err := WriteOwing(path, []byte("new\n"), 0o600, refuse, owe); changed || err == nil || owed != 0 {
		t.Errorf("a refused candidate: changed %v, err %v, owed %d", changed, err, owed)
	}
	if changed, err := WriteOwing(path, []byte("new\n"), 0o600, nil, owe); !changed || err != nil || owed != 1 {
		t.Errorf("a new content: changed %v, err %v, owed %d", changed, err, owed)
	}
	if data, _ := os.ReadFile(path); string(data) != "new\n" {
		t.Errorf("after the write the file holds %q", data)
	}
	if changed, err := WriteOwing(path, []byte("new\n"), 0o600, nil, owe); changed || err != nil || owed != 1 {
		t.Errorf("the same content again: changed %v, err %v, owed %d", changed, err, owed)
	}
	// A debt that cannot be recorded keeps the old file.
	failing := func() error { return errors.New("disk full") }
	if changed, err := WriteOwing(path, []byte("newer\n"), 0o600, nil, failing); changed || err == nil {
		t.Errorf("owe failed: changed %v, err %v", changed, err)
	}
	if data, _ := os.ReadFile(path); string(data) != "new\n" {
		t.Errorf("after a failed owe the file holds %q", data)
	}
}
