// Package vmdk writes and reads streamOptimized VMDK disks, the compressed
// sparse format that OVA archives carry, as described in VMware's "Virtual Disk
// Format 5.0" technical note.
package vmdk

import (
	"encoding/binary"
	"fmt"
)

const (
	sectorSize = 512

	magic = 0x564d444b // "KDMV" read little-endian

	// Header flags.
	flagNewLineTest = 1 << 0
	flagZeroedGrain = 1 << 2
	flagCompressed  = 1 << 16
	flagMarkers     = 1 << 17

	compressDeflate = 1

	// gdAtEnd in the header's gdOffset says: the grain directory is found
	// through the footer at the end of the stream.
	gdAtEnd = ^uint64(0)

	// Marker types, in the marker's type field (when its size field is 0).
	markerEOS    = 0
	markerGT     = 1
	markerGD     = 2
	markerFooter = 3

	defaultGrainSectors = 128 // 64 KiB grains, as VMware writes them
	gtesPerGT           = 512
	descriptorOffset    = 1
	descriptorSectors   = 20
	// overheadSectors is where the first grain starts: header and descriptor,
	// padded to a grain boundary as VMware and qemu do.
	overheadSectors = 128
)

// header is the SparseExtentHeader: the first sector of the file, and again
// as the footer near its end.
type header struct {
	Version           uint32
	Flags             uint32
	Capacity          uint64 // sectors
	GrainSize         uint64 // sectors
	DescriptorOffset  uint64 // sectors
	DescriptorSize    uint64 // sectors
	NumGTEsPerGT      uint32
	RGDOffset         uint64 // sectors
	GDOffset          uint64 // sectors
	OverHead          uint64 // sectors
	UncleanShutdown   uint8
	CompressAlgorithm uint16
}

// marshal encodes h into one sector.
func (h *header) marshal() []byte {
	b := make([]byte, sectorSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], magic)
	le.PutUint32(b[4:], h.Version)
	le.PutUint32(b[8:], h.Flags)
	le.PutUint64(b[12:], h.Capacity)
	le.PutUint64(b[20:], h.GrainSize)
	le.PutUint64(b[28:], h.DescriptorOffset)
	le.PutUint64(b[36:], h.DescriptorSize)
	le.PutUint32(b[44:], h.NumGTEsPerGT)
	le.PutUint64(b[48:], h.RGDOffset)
	le.PutUint64(b[56:], h.GDOffset)
	le.PutUint64(b[64:], h.OverHead)
	b[72] = h.UncleanShutdown
	// The line-ending bytes let readers detect a file mangled by a text-mode
	// transfer.
	b[73], b[74], b[75], b[76] = '\n', ' ', '\r', '\n'
	le.PutUint16(b[77:], h.CompressAlgorithm)
	return b
}

// parseHeader decodes a header sector; it checks only the magic and the
// line-ending bytes, the caller validates the fields it relies on.
func parseHeader(b []byte) (header, error) {
	if len(b) < sectorSize {
		return header{}, fmt.Errorf("header: %d bytes, want %d", len(b), sectorSize)
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[0:]); m != magic {
		return header{}, fmt.Errorf("header magic: %#x, want %#x", m, magic)
	}
	h := header{
		Version:           le.Uint32(b[4:]),
		Flags:             le.Uint32(b[8:]),
		Capacity:          le.Uint64(b[12:]),
		GrainSize:         le.Uint64(b[20:]),
		DescriptorOffset:  le.Uint64(b[28:]),
		DescriptorSize:    le.Uint64(b[36:]),
		NumGTEsPerGT:      le.Uint32(b[44:]),
		RGDOffset:         le.Uint64(b[48:]),
		GDOffset:          le.Uint64(b[56:]),
		OverHead:          le.Uint64(b[64:]),
		UncleanShutdown:   b[72],
		CompressAlgorithm: le.Uint16(b[77:]),
	}
	if h.Flags&flagNewLineTest != 0 && (b[73] != '\n' || b[74] != ' ' || b[75] != '\r' || b[76] != '\n') {
		return header{}, fmt.Errorf("header line-ending bytes: %q, the file was mangled by a text-mode transfer", b[73:77])
	}
	return h, nil
}

// metaMarker encodes a metadata marker sector: numSectors of metadata of the
// given type follow it.
func metaMarker(numSectors uint64, typ uint32) []byte {
	b := make([]byte, sectorSize)
	binary.LittleEndian.PutUint64(b[0:], numSectors)
	// b[8:12], the size field, stays 0: that is what tells a metadata
	// marker from a grain marker.
	binary.LittleEndian.PutUint32(b[12:], typ)
	return b
}

// grainMarkerSize is the lba and size fields before a compressed grain's data.
const grainMarkerSize = 12
