package etcdcopies

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// Two masters' copies of the same half interval may both be under way:
// the one that finishes first is kept, the other is refused at its end
// and leaves nothing behind.
func TestOfTwoCopiesUnderWayTheFirstDoneWins(t *testing.T) {
	s, c, t0 := openDemo(t)
	rule := Rule{Keep: 3, Gap: 30 * time.Minute}
	slow := testutil.EtcdSnapshot(t, 2)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(c, t0.Add(time.Minute), pr, int64(len(slow)), rule, nil)
		done <- err
	}()
	if _, err := pw.Write(slow[:4096]); err != nil { // the slow copy is under way
		t.Fatal(err)
	}
	fast := testutil.EtcdSnapshot(t, 1)
	if _, err := s.Put(c, t0, bytes.NewReader(fast), int64(len(fast)), rule, nil); err != nil {
		t.Fatalf("the copy that finishes first: %v", err)
	}
	if _, err := pw.Write(slow[4096:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var notWanted *NotWantedError
	if err := <-done; !errors.As(err, &notWanted) {
		t.Fatalf("the copy that finished second: %v, want it not wanted", err)
	}
	dir, _ := c.dirName()
	entries, err := os.ReadDir(filepath.Join(s.dir, dir))
	if err != nil || len(entries) != 1 || entries[0].Name() != etcdsnapshot.Name(t0) {
		t.Fatalf("the cluster's directory holds %v (%v), want only the first copy", entries, err)
	}
}

// Whose a copy is, only its sender knows: Put's kept records it before
// anyone listing the copies sees it, so that a pass listing them meanwhile
// does not find a copy it cannot name.
func TestACopyIsListedOnlyOnceItsKeptHasRun(t *testing.T) {
	s, c, t0 := openDemo(t)
	data := testutil.EtcdSnapshot(t, 1)
	listed := make(chan []v1.EtcdSnapshotCopy, 1)
	var seenInKept []v1.EtcdSnapshotCopy
	kept := func(copied v1.EtcdSnapshotCopy) {
		go func() {
			l, err := s.List(c, Rule{})
			if err != nil {
				t.Error(err)
			}
			listed <- l.Items
		}()
		select {
		case seenInKept = <-listed:
		case <-time.After(200 * time.Millisecond):
		}
		if copied.TakenAt != t0 || copied.Bytes != int64(len(data)) {
			t.Errorf("kept got %+v, want the copy of %s, %d bytes", copied, t0, len(data))
		}
	}
	if _, err := s.Put(c, t0, bytes.NewReader(data), int64(len(data)), Rule{Keep: 1}, kept); err != nil {
		t.Fatal(err)
	}
	if seenInKept != nil {
		t.Fatalf("a List while kept ran returned %+v, want it to wait for kept", seenInKept)
	}
	if items := <-listed; len(items) != 1 || !items[0].TakenAt.Equal(t0) {
		t.Errorf("the List after kept: %+v, want the copy", items)
	}
}

// A copy cut short by a kill leaves a temporary file, which the next
// start removes; the copies stay.
func TestOpenRemovesWhatAKilledCopyLeft(t *testing.T) {
	data := t.TempDir()
	s, err := Open(data)
	if err != nil {
		t.Fatal(err)
	}
	c := Cluster{Name: "demo", UID: "0123456789abcdef"}
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	good := testutil.EtcdSnapshot(t, 1)
	if _, err := s.Put(c, t0, bytes.NewReader(good), -1, Rule{Keep: 1}, nil); err != nil {
		t.Fatal(err)
	}
	dir, _ := c.dirName()
	leftover := filepath.Join(data, Dir, dir, "."+etcdsnapshot.Name(t0.Add(time.Hour))+".tmp-123")
	if err := os.WriteFile(leftover, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(data); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the leftover: %v, want it removed", err)
	}
	l, err := s.List(c, Rule{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Bytes != int64(len(good)) {
		t.Errorf("copies after the restart: %+v, %v", l, err)
	}
}

// A cluster name or UID that could leave the directory names nothing.
func TestClusterNamesStayInTheirDirectory(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Cluster{{"..", "0123"}, {"demo", "../x"}, {"a/b", "0123"}, {"", "0123"}, {"demo", ""}, {"Demo", "0123"}} {
		if _, err := s.List(c, Rule{}); err == nil {
			t.Errorf("%+v: listed, want a refusal", c)
		}
		if _, err := s.Put(c, time.Now(), bytes.NewReader(testutil.EtcdSnapshot(t, 1)), -1, Rule{Keep: 1}, nil); err == nil {
			t.Errorf("%+v: copied, want a refusal", c)
		}
		if err := s.Remove(c); err == nil {
			t.Errorf("%+v: removed, want a refusal", c)
		}
	}
}

// A copy never fills the controller's disk: one that would leave less
// than a tenth of it free is refused, as said (its size) or as it
// streams (without one), and leaves nothing. The disk is a 1 MiB tmpfs.
func TestACopyLeavesTheDiskATenthFree(t *testing.T) {
	data := t.TempDir()
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a 1 MiB tmpfs (the test runs as root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(data, 0) })
	s, err := Open(data)
	if err != nil {
		t.Fatal(err)
	}
	c := Cluster{Name: "demo", UID: "0123456789abcdef"}
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	small := testutil.EtcdSnapshot(t, 2)
	if _, err := s.Put(c, t0, bytes.NewReader(small), int64(len(small)), Rule{Keep: 5}, nil); err != nil {
		t.Fatalf("a copy of %d bytes: %v", len(small), err)
	}
	large := testutil.EtcdSnapshot(t, 240) // 960 KiB of 1 MiB
	for _, size := range []int64{int64(len(large)), -1} {
		_, err := s.Put(c, t0.Add(time.Duration(size+2)*time.Hour), bytes.NewReader(large), size, Rule{Keep: 5}, nil)
		if !errors.Is(err, ErrNoRoom) {
			t.Errorf("a copy of %d bytes (size said: %d): %v, want no room", len(large), size, err)
		}
	}
	l, err := s.List(c, Rule{})
	if err != nil || len(l.Items) != 1 {
		t.Errorf("copies after the refusals: %+v, %v; want the small one alone", l, err)
	}
	dir, _ := c.dirName()
	if entries, _ := os.ReadDir(filepath.Join(data, Dir, dir)); len(entries) != 1 {
		t.Errorf("the cluster's directory holds %v, want the small copy alone", entries)
	}
}

// A snapshot asked for by hand (Rule.Want) is copied although the gap
// would refuse it, once: the next within the gap is refused again.
func TestAWantedSnapshotIsCopiedWhateverTheGap(t *testing.T) {
	s, c, t0 := openDemo(t)
	data := testutil.EtcdSnapshot(t, 1)
	put := func(at time.Time, rule Rule) error {
		_, err := s.Put(c, at, bytes.NewReader(data), int64(len(data)), rule, nil)
		return err
	}
	scheduled := Rule{Keep: 5, Gap: 6 * time.Hour}
	if err := put(t0, scheduled); err != nil {
		t.Fatal(err)
	}
	var notWanted *NotWantedError
	if err := put(t0.Add(time.Minute), scheduled); !errors.As(err, &notWanted) {
		t.Fatalf("a copy within the gap: %v, want it not wanted", err)
	}
	asked := scheduled
	asked.Want = t0.Add(2 * time.Minute)
	if err := put(t0.Add(time.Minute), asked); !errors.As(err, &notWanted) {
		t.Errorf("a copy taken before the one wanted: %v, want it not wanted", err)
	}
	list, err := s.List(c, asked)
	if err != nil || !list.NextAfter.Equal(asked.Want) {
		t.Fatalf("next after %s (%v), want %s", list.NextAfter, err, asked.Want)
	}
	if err := put(t0.Add(3*time.Minute), asked); err != nil {
		t.Fatalf("the copy wanted: %v", err)
	}
	if err := put(t0.Add(4*time.Minute), asked); !errors.As(err, &notWanted) {
		t.Errorf("a second copy after the one wanted: %v, want it not wanted", err)
	}
	if list, err := s.List(c, asked); err != nil || len(list.Items) != 2 || !list.NextAfter.Equal(t0.Add(3*time.Minute+6*time.Hour)) {
		t.Errorf("copies %+v, next after %s (%v), want two and the gap after the second", list.Items, list.NextAfter, err)
	}
}

// openDemo opens a store in a new directory, with the cluster and the
// time its tests use.
func openDemo(t *testing.T) (*Store, Cluster, time.Time) {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s, Cluster{Name: "demo", UID: "0123456789abcdef"}, time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
}
