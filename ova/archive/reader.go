package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/harmonykaas/harmony/internal/ctxio"
	"github.com/harmonykaas/harmony/ova/ovf"
	"github.com/harmonykaas/harmony/ova/vmdk"
)

// Limits on the small members, so a hostile archive cannot make Validate
// buffer gigabytes.
const (
	maxOVF      = 4 << 20
	maxManifest = 1 << 20
)

// Limits on what Validate reads and reports, so that a hostile archive
// costs about its own size at most, and its error stays a page long: the
// controller sends that error back as the HTTP answer.
const (
	// MaxEntryName is the longest entry name Validate reads on: what a
	// USTAR header's name (100 bytes) and prefix (155) fields hold. Longer
	// names come from GNU or PAX records, which archive/tar takes at up
	// to 1 MiB each.
	MaxEntryName = 255
	// MaxEntries bounds the entries Validate reads. An OVA holds a
	// descriptor, a manifest, its disks (at most 15, the units of one SCSI
	// controller) and perhaps a certificate; 64 leaves room for odd extras
	// while keeping the per-entry records and faults small.
	MaxEntries = 64
	// MaxFaults is how many faults Validate's error lists; the others are
	// only counted.
	MaxFaults = 50
	// MaxDiskCapacity is the largest virtual disk Validate accepts, in
	// bytes, from the descriptor (ovf.Parse refuses more) and from a VMDK
	// header (ova/vmdk refuses more than 2 TiB already).
	MaxDiskCapacity = ovf.MaxDiskCapacity

	// maxFaultBytes cuts one fault's message; real ones are under 300.
	maxFaultBytes = 1024
	// maxQuoted is how much of a name or value a message quotes.
	maxQuoted = 64
)

// Entry is one file in an OVA, in archive order.
type Entry struct {
	Name string
	Size int64
}

// Contents is what Validate read.
type Contents struct {
	Entries []Entry
	// Descriptor is nil when the .ovf is missing or does not parse.
	Descriptor *ovf.Descriptor
	Hash       Hash
	// Disks are the headers of the .vmdk entries that parsed, by name.
	Disks map[string]*vmdk.Info
}

// Validate reads a whole OVA and reports every fault it finds: tar order
// (.ovf first, .mf second), USTAR headers, manifest digests, and that every
// file the descriptor references is present with the size it states. The
// error, if any, joins one message per fault, the first MaxFaults of them.
// Validate stops reading at an entry name longer than MaxEntryName or past
// MaxEntries entries.
func Validate(ctx context.Context, r io.Reader) (*Contents, error) {
	v := &validator{c: &Contents{Disks: map[string]*vmdk.Info{}}, sizes: map[string]int64{}, sums: map[string]sums{}}
	tr := tar.NewReader(ctxio.Reader(ctx, r))
	// Both stops below come after archive/tar has read the header (with a
	// long name, up to 1 MiB), but before anything keeps or copies it.
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			if i == 0 {
				v.fault("archive is empty")
			}
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("ova: validate: %w", ctx.Err())
			}
			v.fault("tar: entry %d: %v", i+1, err)
			break
		}
		if i == MaxEntries {
			v.fault("entry %d: more than %d entries, where an OVA has a descriptor, a manifest and its disks: stopped reading", i+1, MaxEntries)
			break
		}
		if len(hdr.Name) > MaxEntryName {
			v.fault("entry %d: name %s: longer than the %d bytes a USTAR header holds: stopped reading", i+1, quote(hdr.Name), MaxEntryName)
			break
		}
		if err := v.entry(i, hdr, tr); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("ova: validate: %w", ctx.Err())
			}
			v.fault("%s: read: %v", show(hdr.Name), err)
			break
		}
	}
	v.finish()
	if n := len(v.faults) + v.more; n > 0 {
		faults := v.faults
		if v.more > 0 {
			faults = append(faults, fmt.Errorf("… and %d more faults", v.more))
		}
		return v.c, fmt.Errorf("ova: %d fault(s):\n%w", n, errors.Join(faults...))
	}
	return v.c, nil
}

// quote renders a name or value from the archive for a message: quoted, so
// no control character reaches a terminal, and cut to its first maxQuoted
// bytes with its length when longer.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:maxQuoted]), len(s))
}

// show renders an entry name for a message: as is when it is a valid OVA
// file name, else through quote.
func show(name string) string {
	if ovf.CheckFileName(name) == nil {
		return name
	}
	return quote(name)
}

type sums struct{ sha1, sha256 []byte }

type validator struct {
	c      *Contents
	faults []error
	more   int // faults past MaxFaults, counted only
	// names are the entries' names in archive order, unquoted (Contents
	// quotes the invalid ones).
	names    []string
	ovfName  string
	mfName   string
	manifest []ManifestEntry
	haveMF   bool
	sizes    map[string]int64
	sums     map[string]sums
}

func (v *validator) fault(format string, args ...any) {
	if len(v.faults) >= MaxFaults {
		v.more++ // not formatted: that is the cost being bounded
		return
	}
	msg := fmt.Sprintf(format, args...)
	if len(msg) > maxFaultBytes {
		msg = strings.ToValidUTF8(msg[:maxFaultBytes], "") + "… (cut)"
	}
	v.faults = append(v.faults, errors.New(msg))
}

func (v *validator) entry(i int, hdr *tar.Header, tr io.Reader) error {
	name, shown := hdr.Name, show(hdr.Name)
	valid := true
	listed := name
	if err := ovf.CheckFileName(name); err != nil {
		// Quoted in Contents: a hostile name must not reach a terminal raw.
		valid, listed = false, strconv.Quote(name)
		v.fault("entry %d: %v", i+1, err)
	}
	v.c.Entries = append(v.c.Entries, Entry{Name: listed, Size: hdr.Size})
	v.names = append(v.names, name)
	if hdr.Typeflag != tar.TypeReg {
		v.fault("%s: tar type %q, want a regular file", shown, hdr.Typeflag)
	}
	if hdr.Format != tar.FormatUSTAR {
		v.fault("%s: header format %v, want plain USTAR (no PAX or GNU records)", shown, hdr.Format)
	}
	// Only a regular file's bytes are read. A GNU sparse entry (type 'S',
	// or GNU.sparse.* PAX records) reads as its declared size in zeros
	// without reading the archive: a 2 KB entry could keep Validate hashing
	// for hours, deaf to ctx.
	sparse := sparsePAX(hdr)
	if sparse {
		v.fault("%s: GNU sparse file of %d bytes: not read", shown, hdr.Size)
	}
	readable := hdr.Typeflag == tar.TypeReg && !sparse
	if _, dup := v.sizes[name]; dup {
		v.fault("%s: appears twice in the archive", shown)
	}
	v.sizes[name] = hdr.Size

	switch {
	case valid && strings.HasSuffix(name, ".ovf"):
		if i != 0 {
			v.fault("%s: descriptor is entry %d, must be first", shown, i+1)
		}
		if v.ovfName != "" {
			v.fault("%s: second descriptor (first was %s)", shown, v.ovfName)
		}
		v.ovfName = name
		if !readable {
			return nil
		}
		data, err := v.readSmall(name, tr, hdr.Size, maxOVF)
		if err != nil || data == nil {
			return err
		}
		d, err := ovf.Parse(data)
		if err != nil {
			// One fault per problem, so MaxFaults and maxFaultBytes apply
			// to each rather than cutting the list.
			var j interface{ Unwrap() []error }
			if !errors.As(err, &j) {
				v.fault("%s: %v", shown, err)
				return nil
			}
			for _, e := range j.Unwrap() {
				v.fault("%s: invalid descriptor: %v", shown, e)
			}
			return nil
		}
		v.c.Descriptor = d
		return nil
	case valid && strings.HasSuffix(name, ".mf"):
		if i != 1 {
			v.fault("%s: manifest is entry %d, must be second", shown, i+1)
		}
		if v.haveMF {
			v.fault("%s: second manifest (first was %s)", shown, v.mfName)
		}
		v.mfName, v.haveMF = name, true
		if !readable {
			return nil
		}
		data, err := v.readSmall(name, tr, hdr.Size, maxManifest)
		if err != nil || data == nil {
			return err
		}
		h, entries, err := ParseManifest(data)
		if err != nil {
			v.fault("%s: %v", shown, err)
			return nil
		}
		v.c.Hash, v.manifest = h, entries
		return nil
	default:
		if i < 2 {
			v.fault("%s: disk is entry %d, but the descriptor and manifest come first", shown, i+1)
		}
	}
	if !readable {
		return nil
	}
	if !valid || !strings.HasSuffix(name, ".vmdk") {
		return v.digest(name, tr)
	}
	// A disk's header, descriptor and footer are checked as it streams
	// through the digest.
	check := vmdk.NewStreamChecker()
	if err := v.digest(name, io.TeeReader(tr, check)); err != nil {
		return err
	}
	info, err := check.Finish()
	if err != nil {
		for _, e := range unjoin(err) {
			v.fault("%s: %v", shown, e)
		}
	}
	if info != nil {
		v.c.Disks[name] = info
	}
	return nil
}

// sparsePAX reports PAX records that make archive/tar expand the entry as
// a GNU sparse file.
func sparsePAX(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// unjoin splits an errors.Join into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// readSmall buffers a small member and digests it; nil data means it was
// too large (a fault, already reported).
func (v *validator) readSmall(name string, tr io.Reader, size, limit int64) ([]byte, error) {
	if size > limit {
		v.fault("%s: %d bytes, limit %d", name, size, limit)
		return nil, nil
	}
	// Exactly the header's size, which tar will not read past.
	data := make([]byte, size)
	if _, err := io.ReadFull(tr, data); err != nil {
		return nil, err
	}
	v.digestBytes(name, data)
	return data, nil
}

func (v *validator) digestBytes(name string, data []byte) {
	_ = v.digest(name, bytes.NewReader(data))
}

// digest computes the digests the manifest may ask for. When the manifest
// came first (the normal order) only its algorithm is computed.
func (v *validator) digest(name string, r io.Reader) error {
	if _, done := v.sums[name]; done {
		return nil
	}
	var h1, h256 hash.Hash
	var ws []io.Writer
	if !v.haveMF || v.c.Hash == SHA1 {
		h1 = SHA1.new()
		ws = append(ws, h1)
	}
	if !v.haveMF || v.c.Hash == SHA256 {
		h256 = SHA256.new()
		ws = append(ws, h256)
	}
	if _, err := io.Copy(io.MultiWriter(ws...), r); err != nil {
		return err
	}
	var s sums
	if h1 != nil {
		s.sha1 = h1.Sum(nil)
	}
	if h256 != nil {
		s.sha256 = h256.Sum(nil)
	}
	v.sums[name] = s
	return nil
}

func (v *validator) finish() {
	if v.ovfName == "" {
		v.fault("no .ovf descriptor in the archive")
	}
	if !v.haveMF {
		v.fault("no .mf manifest in the archive")
	}
	if v.ovfName != "" && v.haveMF && strings.TrimSuffix(v.ovfName, ".ovf") != strings.TrimSuffix(v.mfName, ".mf") {
		v.fault("%s: manifest name does not match descriptor %s", v.mfName, v.ovfName)
	}
	if v.haveMF && v.manifest != nil {
		listed := map[string]bool{}
		for _, e := range v.manifest {
			listed[e.Name] = true
			s, ok := v.sums[e.Name]
			if !ok {
				if _, inTar := v.sizes[e.Name]; inTar {
					continue // present but unreadable: that fault is already reported
				}
				v.fault("%s: lists %s, which is not in the archive", v.mfName, e.Name)
				continue
			}
			got := s.sha256
			if v.c.Hash == SHA1 {
				got = s.sha1
			}
			if !bytes.Equal(got, e.Digest) {
				v.fault("%s: %s digest mismatch: manifest says %x, content is %x", e.Name, v.c.Hash, e.Digest, got)
			}
		}
		for _, name := range v.names {
			if name != v.mfName && !listed[name] {
				v.fault("%s: not listed in manifest %s", show(name), v.mfName)
			}
		}
	}
	if d := v.c.Descriptor; d != nil {
		referenced := map[string]bool{}
		for _, k := range d.Disks {
			referenced[k.File] = true
			size, ok := v.sizes[k.File]
			switch {
			case !ok:
				v.fault("%s: referenced by %s (disk %s) but missing from the archive", k.File, v.ovfName, k.ID)
			case size != k.FileSize:
				v.fault("%s: %d bytes in the archive, References ovf:size says %d", k.File, size, k.FileSize)
			}
			if info := v.c.Disks[k.File]; info != nil {
				if info.Capacity != k.Capacity {
					v.fault("%s: the VMDK header's capacity is %d bytes, the descriptor's disk %s says ovf:capacity %d", k.File, info.Capacity, k.ID, k.Capacity)
				}
				if info.Extent != "" && info.Extent != k.File {
					v.fault("%s: the VMDK's extent line names %s", k.File, quote(info.Extent))
				}
			} else if ok && strings.HasSuffix(k.File, ".vmdk") {
				if _, read := v.sums[k.File]; read {
					v.fault("%s: disk %s has no readable VMDK header", k.File, k.ID)
				}
			}
		}
		var extra []string
		for name := range v.sizes {
			if name != v.ovfName && name != v.mfName && !referenced[name] {
				extra = append(extra, name)
			}
		}
		sort.Strings(extra)
		for _, name := range extra {
			v.fault("%s: in the archive but not referenced by %s", show(name), v.ovfName)
		}
	}
}
