// Package etcdsnapshot is what the agent and the controller both know of an
// etcd snapshot file: its name, which carries when it was taken, and its
// check, etcd's SHA-256 of the database appended to it (what `etcdctl
// snapshot save` writes and `etcdctl snapshot restore` checks).
package etcdsnapshot

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MaxBytes bounds one snapshot: etcd's largest quota, 8 GiB, and the hash.
const MaxBytes = 8<<30 + sha256.Size

const (
	prefix = "snapshot-"
	suffix = ".db"
	// The name carries the time, so that the newest is known from the
	// names alone, also by an operator with ls.
	timeLayout = "20060102T150405Z"
)

// Name is the file name of a snapshot taken at taken. The agent lists
// its snapshots by such names, so a file of this name, whoever saved it
// (etcdctl snapshot save, or a copy from the controller), counts as one
// of them and restores the same.
func Name(taken time.Time) string {
	return prefix + taken.UTC().Format(timeLayout) + suffix
}

// ParseName is the time a snapshot file's name says it was taken; false
// for a name that is not a snapshot's.
func ParseName(name string) (time.Time, bool) {
	stamp, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return time.Time{}, false
	}
	stamp, ok = strings.CutSuffix(stamp, suffix)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(timeLayout, stamp)
	return t, err == nil
}

// HasPrefix reports whether name starts like a snapshot's: a temporary
// file of one (atomicfile's leftovers start with a dot and the name).
func HasPrefix(name string) bool { return strings.HasPrefix(name, prefix) }

// Checker checks a snapshot as it streams through Write: its size and
// its trailing SHA-256.
type Checker struct {
	h    hash.Hash
	tail []byte
	n    int64
}

// NewChecker returns a Checker that has seen nothing.
func NewChecker() *Checker { return &Checker{h: sha256.New()} }

// Write hashes all but the last 32 bytes seen so far; it never fails.
func (c *Checker) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - sha256.Size; over > 0 {
		c.h.Write(c.tail[:over])
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
	return len(p), nil
}

// Check says whether what was written is a whole snapshot: a database
// (whole pages; etcdctl tells a hashed snapshot by the size modulo 512
// too) and its SHA-256.
func (c *Checker) Check() error {
	if db := c.n - sha256.Size; db <= 0 || db%512 != 0 {
		return fmt.Errorf("not an etcd snapshot: %d bytes, not a database and its SHA-256", c.n)
	}
	if len(c.tail) != sha256.Size || !bytes.Equal(c.h.Sum(nil), c.tail) {
		return errors.New("the snapshot's SHA-256 does not match its content: damaged on the way")
	}
	return nil
}

// Room is how large a snapshot of a database of dbSize bytes may grow on
// the file system of dir: it must leave free at least the database's size
// again or a tenth of the disk, whichever is more, so that a snapshot
// never takes the room etcd (or the controller's store) needs to grow.
func Room(dir string, dbSize uint64) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("free space for a snapshot: %w", err)
	}
	free := fs.Bavail * uint64(fs.Bsize)
	total := fs.Blocks * uint64(fs.Bsize)
	return room(free, total, dbSize)
}

// room is Room's rule, apart from the file system.
func room(free, total, dbSize uint64) (int64, error) {
	reserve := max(dbSize, total/10)
	need := dbSize + sha256.Size + reserve
	if free < need {
		return 0, fmt.Errorf("the disk has %d bytes free; a snapshot of the %d-byte database would leave less than %d", free, dbSize, reserve)
	}
	return int64(min(free-reserve, MaxBytes)), nil
}
