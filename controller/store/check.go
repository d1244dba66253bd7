package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// bbolt's on-disk format, read here before bbolt maps the file: bbolt
// trusts its meta page and maps the file, so a file shorter than the meta
// page says kills the process with SIGBUS on the first read past its end,
// and a damaged data page panics. Both must become an error that names
// the file. (go.etcd.io/bbolt/internal/common: page.go, meta.go.)
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	boltPageHeader  = 16 // id uint64, flags uint16, count uint16, overflow uint32
	boltMetaSumSpan = 56 // the meta fields before its checksum
	boltMinPageSize = 1024
	boltMaxPageSize = 64 << 10
)

// ErrDamaged is a store file that exists but cannot be used as it is: empty,
// short, not a bbolt file, or with damaged pages. The controller refuses to
// start on it; the fix is a restore from a backup.
var ErrDamaged = errors.New("store is damaged")

// DamagedError says what is wrong with which file.
type DamagedError struct {
	Path   string
	Reason string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("store %s is damaged: %s", e.Path, e.Reason)
}

func (e *DamagedError) Unwrap() error { return ErrDamaged }

type boltMeta struct {
	pageSize uint32
	pgid     uint64 // high-water mark: pages in use
	txid     uint64
}

// CheckFile checks a store file's header without mapping it: both meta
// pages are read, at least one must be valid, and the file must hold every
// page the newest valid meta page counts. A missing file is
// os.ErrNotExist and one this process may not read os.ErrPermission, not
// damage; anything else wrong is a *DamagedError.
func CheckFile(path string) error {
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return err
	case errors.Is(err, os.ErrPermission):
		// Not damage: a restore would not mend it, its owner would.
		return fmt.Errorf("store %s: %w", path, err)
	case err != nil:
		return &DamagedError{Path: path, Reason: fmt.Sprintf("unreadable: %v", err)}
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return &DamagedError{Path: path, Reason: fmt.Sprintf("unreadable: %v", err)}
	}
	size := info.Size()
	if size == 0 {
		return &DamagedError{Path: path, Reason: "the file is empty"}
	}
	m0, err0 := readMeta(f, 0)
	var m1 boltMeta
	err1 := errors.New("no page size")
	if err0 == nil {
		m1, err1 = readMeta(f, int64(m0.pageSize))
	} else {
		// The first meta page is bad: find the second the way bbolt does,
		// at each possible page size.
		for ps := int64(boltMinPageSize); ps <= boltMaxPageSize && ps < size; ps <<= 1 {
			if m1, err1 = readMeta(f, ps); err1 == nil && int64(m1.pageSize) == ps {
				break
			}
		}
	}
	var best boltMeta
	switch {
	case err0 == nil && err1 == nil:
		best = m0
		if m1.txid > m0.txid {
			best = m1
		}
	case err0 == nil:
		best = m0
	case err1 == nil:
		best = m1
	default:
		return &DamagedError{Path: path, Reason: fmt.Sprintf("no valid bbolt meta page (%d bytes; first: %v; second: %v)", size, err0, err1)}
	}
	if need := int64(best.pgid) * int64(best.pageSize); size < need {
		return &DamagedError{Path: path, Reason: fmt.Sprintf("truncated: %d bytes, but its meta page counts %d pages of %d bytes (%d bytes)",
			size, best.pgid, best.pageSize, need)}
	}
	return nil
}

func readMeta(r io.ReaderAt, off int64) (boltMeta, error) {
	buf := make([]byte, boltPageHeader+boltMetaSumSpan+8)
	if _, err := r.ReadAt(buf, off); err != nil {
		return boltMeta{}, fmt.Errorf("read meta page at %d: %w", off, err)
	}
	m := buf[boltPageHeader:]
	le := binary.LittleEndian
	switch {
	case le.Uint32(m[0:]) != boltMagic:
		return boltMeta{}, fmt.Errorf("meta page at %d: not a bbolt file", off)
	case le.Uint32(m[4:]) != boltVersion:
		return boltMeta{}, fmt.Errorf("meta page at %d: format version %d, want %d", off, le.Uint32(m[4:]), boltVersion)
	}
	h := fnv.New64a()
	h.Write(m[:boltMetaSumSpan])
	if le.Uint64(m[boltMetaSumSpan:]) != h.Sum64() {
		return boltMeta{}, fmt.Errorf("meta page at %d: checksum mismatch", off)
	}
	meta := boltMeta{pageSize: le.Uint32(m[8:]), pgid: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}
	if meta.pageSize < boltMinPageSize || meta.pageSize > boltMaxPageSize || meta.pageSize&(meta.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("meta page at %d: page size %d", off, meta.pageSize)
	}
	return meta, nil
}

// guard runs fn, turning a bbolt panic or a memory fault on the mapped file
// into an error: bbolt asserts its page invariants with panics, and reading
// a mapping past the end of a file that shrank faults.
func guard(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = &DamagedError{Path: path, Reason: fmt.Sprintf("reading it failed: %v", p)}
		}
	}()
	return fn()
}

// verify reads every bucket, key and value, so that a damaged page is
// found at start, where it is an error, and not by a request, where it
// would be a crash.
func verify(tx *bolt.Tx) error {
	// Hashing every key and value touches every byte the pages point at.
	h := fnv.New64a()
	var walk func(b *bolt.Bucket, depth int) error
	walk = func(b *bolt.Bucket, depth int) error {
		if depth > 8 {
			return errors.New("buckets nested too deep")
		}
		return b.ForEach(func(k, v []byte) error {
			h.Write(k)
			h.Write(v)
			if v == nil {
				if child := b.Bucket(k); child != nil {
					return walk(child, depth+1)
				}
			}
			return nil
		})
	}
	return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		if err := walk(b, 0); err != nil {
			return fmt.Errorf("bucket %q: %w", name, err)
		}
		return nil
	})
}
