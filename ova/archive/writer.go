package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/internal/ctxio"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// maxUSTARTime is the largest mtime an 11-digit octal field holds.
const maxUSTARTime = 1<<33 - 1

// Disk is one disk file to pack. Open is called twice, once to digest the
// file for the manifest (which precedes the disks) and once to copy it;
// both reads must give the same bytes.
type Disk struct {
	// Name is the file name in the OVA and in the descriptor's References.
	Name string
	Open func() (io.ReadCloser, error)
}

// DiskFile packs the file at path under its base name.
func DiskFile(path string) Disk {
	return Disk{Name: filepath.Base(path), Open: func() (io.ReadCloser, error) { return os.Open(path) }}
}

// Options describe one OVA.
type Options struct {
	// Name is the base name: the archive holds Name.ovf and Name.mf.
	Name string
	// Descriptor is the rendered OVF descriptor. Its References must name
	// exactly the Disks, with their sizes.
	Descriptor []byte
	Disks      []Disk
	// Hash is the manifest algorithm; the zero value is SHA256.
	Hash Hash
	// ModTime is every entry's mtime, for example from SourceDateEpoch.
	// The zero value means the Unix epoch.
	ModTime time.Time
}

// SourceDateEpoch parses the SOURCE_DATE_EPOCH convention (decimal seconds
// since 1970) into a time for Options.ModTime.
func SourceDateEpoch(value string) (time.Time, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
	if err != nil || n < 0 || n > maxUSTARTime {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970, 0 to %d", value, int64(maxUSTARTime))
	}
	return time.Unix(n, 0).UTC(), nil
}

// Write writes the OVA to w: Name.ovf, Name.mf, then the disks in order.
// It checks the descriptor against the disks first and writes nothing if
// they disagree.
func Write(ctx context.Context, w io.Writer, o Options) error {
	mtime, err := o.check()
	if err != nil {
		return err
	}
	desc, err := ovf.Parse(o.Descriptor)
	if err != nil {
		return fmt.Errorf("ova: descriptor: %w", err)
	}
	refs := map[string]int64{}
	for _, k := range desc.Disks {
		refs[k.File] = k.FileSize
	}

	// First pass: digest and size every disk for the manifest.
	ovfName, mfName := o.Name+".ovf", o.Name+".mf"
	entries := []ManifestEntry{{Name: ovfName, Digest: digest(o.Hash, o.Descriptor)}}
	sizes := make([]int64, len(o.Disks))
	var errs []error
	for i, d := range o.Disks {
		sum, n, err := digestDisk(ctx, o.Hash, d)
		if err != nil {
			return err
		}
		sizes[i] = n
		entries = append(entries, ManifestEntry{Name: d.Name, Digest: sum})
		want, ok := refs[d.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("disk %q: not in the descriptor's References", d.Name))
		case want != n:
			errs = append(errs, fmt.Errorf("disk %q: %d bytes, References ovf:size says %d", d.Name, n, want))
		}
		delete(refs, d.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		errs = append(errs, fmt.Errorf("References file %q: no such disk given", name))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ova: descriptor and disks disagree: %w", err)
	}
	mf, err := FormatManifest(o.Hash, entries)
	if err != nil {
		return fmt.Errorf("ova: %w", err)
	}

	tw := tar.NewWriter(w)
	if err := writeEntry(tw, ovfName, mtime, o.Descriptor); err != nil {
		return err
	}
	if err := writeEntry(tw, mfName, mtime, mf); err != nil {
		return err
	}
	for i, d := range o.Disks {
		if err := copyDisk(ctx, tw, o.Hash, d, mtime, sizes[i], entries[i+1].Digest); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("ova: finish tar: %w", err)
	}
	return nil
}

func (o *Options) check() (time.Time, error) {
	var errs []error
	if err := ovf.CheckFileName(o.Name + ".ovf"); err != nil {
		errs = append(errs, fmt.Errorf("name: %w", err))
	}
	if !o.Hash.valid() {
		errs = append(errs, fmt.Errorf("hash: unknown %v", o.Hash))
	}
	if len(o.Disks) == 0 {
		errs = append(errs, errors.New("disks: none given"))
	}
	seen := map[string]bool{o.Name + ".ovf": true, o.Name + ".mf": true}
	for i, d := range o.Disks {
		if err := ovf.CheckFileName(d.Name); err != nil {
			errs = append(errs, fmt.Errorf("disks[%d]: %w", i, err))
		}
		if seen[d.Name] {
			errs = append(errs, fmt.Errorf("disks[%d]: name %q used twice", i, d.Name))
		}
		seen[d.Name] = true
		if d.Open == nil {
			errs = append(errs, fmt.Errorf("disks[%d] (%s): Open is nil", i, d.Name))
		}
	}
	mtime := o.ModTime
	if mtime.IsZero() {
		mtime = time.Unix(0, 0)
	}
	if s := mtime.Unix(); s < 0 || s > maxUSTARTime {
		errs = append(errs, fmt.Errorf("modTime %s: outside what a USTAR header holds", mtime))
	}
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, fmt.Errorf("ova: invalid options: %w", err)
	}
	return time.Unix(mtime.Unix(), 0).UTC(), nil
}

// header is the one deterministic header shape every entry gets.
func header(name string, size int64, mtime time.Time) *tar.Header {
	return &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Size:     size,
		Mode:     0o644,
		ModTime:  mtime,
		Format:   tar.FormatUSTAR, // refuses anything that would need PAX or GNU records
	}
}

func writeEntry(tw *tar.Writer, name string, mtime time.Time, data []byte) error {
	if err := tw.WriteHeader(header(name, int64(len(data)), mtime)); err != nil {
		return fmt.Errorf("ova: %s: header: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("ova: %s: %w", name, err)
	}
	return nil
}

func digest(h Hash, data []byte) []byte {
	s := h.new()
	s.Write(data)
	return s.Sum(nil)
}

func digestDisk(ctx context.Context, h Hash, d Disk) ([]byte, int64, error) {
	f, err := d.Open()
	if err != nil {
		return nil, 0, fmt.Errorf("ova: disk %q: open: %w", d.Name, err)
	}
	defer f.Close()
	s := h.new()
	n, err := io.Copy(s, ctxio.Reader(ctx, f))
	if err != nil {
		return nil, 0, fmt.Errorf("ova: disk %q: read: %w", d.Name, err)
	}
	return s.Sum(nil), n, nil
}

// copyDisk streams a disk into the tar and checks it still has the size and
// digest the manifest already recorded.
func copyDisk(ctx context.Context, tw *tar.Writer, h Hash, d Disk, mtime time.Time, size int64, sum []byte) error {
	f, err := d.Open()
	if err != nil {
		return fmt.Errorf("ova: disk %q: open: %w", d.Name, err)
	}
	defer f.Close()
	if err := tw.WriteHeader(header(d.Name, size, mtime)); err != nil {
		return fmt.Errorf("ova: disk %q: header: %w", d.Name, err)
	}
	s := h.new()
	n, err := io.Copy(io.MultiWriter(tw, s), ctxio.Reader(ctx, f))
	if err != nil {
		return fmt.Errorf("ova: disk %q: copy: %w", d.Name, err)
	}
	if n != size || !bytes.Equal(s.Sum(nil), sum) {
		return fmt.Errorf("ova: disk %q: changed while packing (size %d, then %d)", d.Name, size, n)
	}
	return nil
}
