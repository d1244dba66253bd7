// Package ova assembles an OVA from raw disk images: each disk becomes a
// streamOptimized VMDK (ova/vmdk), the descriptor gets the disks' sizes
// (ova/ovf), and the files go into one archive with its manifest
// (ova/archive). The same inputs and ModTime give the same bytes.
package ova

import (
	"cmp"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
	"github.com/harmonykaas/harmony/ova/vmdk"
)

// SourceDisk is one disk of the appliance.
type SourceDisk struct {
	// ID is the ovf:diskId, for example "system" or "data".
	ID string
	// RawPath is a raw disk image. Empty means an empty disk of Capacity
	// bytes, such as a data disk that upgrades move across.
	RawPath string
	// Capacity of an empty disk, a positive multiple of 512. For a raw
	// image it is the image's size.
	Capacity int64
}

// Options describe one OVA.
type Options struct {
	// Output is the .ova file written. It appears only when complete: the
	// archive is written beside it and renamed.
	Output string
	// Descriptor is everything but the disks, which Assemble fills in.
	Descriptor ovf.Descriptor
	Disks      []SourceDisk
	// Hash is the manifest algorithm; the zero value is SHA256.
	Hash archive.Hash
	// ModTime is every archive entry's mtime (SOURCE_DATE_EPOCH).
	ModTime time.Time
	// Workers compressing grains; 0 means every core.
	Workers int
	// Level is the deflate level; 0 means flate.BestCompression: an image
	// is written once and downloaded and imported many times.
	Level int
}

// Assemble writes the OVA and returns the descriptor it holds.
func Assemble(ctx context.Context, o Options) (*ovf.Descriptor, error) {
	if o.Output == "" {
		return nil, errors.New("ova: output: empty")
	}
	if len(o.Disks) == 0 {
		return nil, errors.New("ova: disks: none given")
	}
	name := o.Descriptor.Name
	dir := filepath.Dir(o.Output)
	work, err := os.MkdirTemp(dir, ".assemble-")
	if err != nil {
		return nil, fmt.Errorf("ova: work directory: %w", err)
	}
	defer os.RemoveAll(work)

	desc := o.Descriptor
	desc.Disks = nil
	var files []archive.Disk
	for i, d := range o.Disks {
		file := fmt.Sprintf("%s-disk%d.vmdk", name, i+1)
		disk, err := writeVMDK(ctx, filepath.Join(work, file), d, vmdk.Options{
			Adapter:    vmdk.AdapterPVSCSI,
			ExtentName: file,
			Workers:    o.Workers,
			Level:      cmp.Or(o.Level, flate.BestCompression),
		})
		if err != nil {
			return nil, fmt.Errorf("ova: disks[%d] (%s): %w", i, d.ID, err)
		}
		disk.ID, disk.File = d.ID, file
		desc.Disks = append(desc.Disks, disk)
		files = append(files, archive.DiskFile(filepath.Join(work, file)))
	}
	rendered, err := ovf.Render(&desc)
	if err != nil {
		return nil, fmt.Errorf("ova: descriptor: %w", err)
	}

	partial := filepath.Join(work, filepath.Base(o.Output))
	f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ova: %w", err)
	}
	err = archive.Write(ctx, f, archive.Options{
		Name: name, Descriptor: rendered, Disks: files, Hash: o.Hash, ModTime: o.ModTime,
	})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("ova: write %s: %w", o.Output, err)
	}
	if err := os.Rename(partial, o.Output); err != nil {
		return nil, fmt.Errorf("ova: %w", err)
	}
	return &desc, nil
}

// writeVMDK converts one source disk and reports its sizes.
func writeVMDK(ctx context.Context, path string, d SourceDisk, opts vmdk.Options) (ovf.Disk, error) {
	var src io.ReaderAt
	size := d.Capacity
	if d.RawPath != "" {
		in, err := os.Open(d.RawPath)
		if err != nil {
			return ovf.Disk{}, err
		}
		defer in.Close()
		st, err := in.Stat()
		if err != nil {
			return ovf.Disk{}, err
		}
		if d.Capacity != 0 && d.Capacity != st.Size() {
			return ovf.Disk{}, fmt.Errorf("capacity %d: the raw image %s is %d bytes", d.Capacity, d.RawPath, st.Size())
		}
		src, size = in, st.Size()
	} else {
		if size <= 0 || size%512 != 0 {
			return ovf.Disk{}, fmt.Errorf("capacity %d: an empty disk needs a positive multiple of 512 bytes", size)
		}
		src = zeros{}
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return ovf.Disk{}, err
	}
	stats, err := vmdk.Write(ctx, out, src, size, opts)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ovf.Disk{}, err
	}
	return ovf.Disk{FileSize: stats.Bytes, Capacity: size, PopulatedSize: stats.PopulatedBytes}, nil
}

// zeros reads as an endless run of zero bytes: an empty disk.
type zeros struct{}

func (zeros) ReadAt(p []byte, _ int64) (int, error) {
	clear(p)
	return len(p), nil
}
