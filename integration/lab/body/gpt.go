package body

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf16"
)

// The GPT layout we rely on (UEFI 2.x, 512-byte sectors, which is what
// the image build writes).
const (
	sectorSize       = 512
	gptSignature     = "EFI PART"
	gptMaxEntries    = 1024
	gptMinEntrySize  = 128
	gptMaxEntrySize  = 4096
	gptNameOffset    = 56
	gptNameMaxUnits  = 36 // UTF-16 code units in a 128-byte entry
	maxPartitionName = 64
)

// Partition is one GPT entry, in bytes.
type Partition struct {
	Name   string
	Offset int64
	Size   int64
}

// findPartition reads the primary GPT of a raw disk of the given size and
// returns the partition with the given name.
func findPartition(r io.ReaderAt, diskSize int64, name string) (Partition, error) {
	parts, err := readGPT(r, diskSize)
	if err != nil {
		return Partition{}, err
	}
	var names []string
	for _, p := range parts {
		if p.Name == name {
			return p, nil
		}
		names = append(names, fmt.Sprintf("%q", p.Name))
	}
	return Partition{}, fmt.Errorf("no GPT partition named %q (have %v)", name, names)
}

// readGPT returns the used entries of a disk's primary GPT. Every number is
// checked against the disk's size before it is used: the disk comes from
// an OVA, outside input.
func readGPT(r io.ReaderAt, diskSize int64) ([]Partition, error) {
	hdr := make([]byte, sectorSize)
	if _, err := r.ReadAt(hdr, sectorSize); err != nil {
		return nil, fmt.Errorf("read GPT header: %w", err)
	}
	if !bytes.Equal(hdr[:8], []byte(gptSignature)) {
		return nil, errors.New("GPT header: no \"EFI PART\" signature at LBA 1")
	}
	le := binary.LittleEndian
	entriesLBA := le.Uint64(hdr[72:])
	count := le.Uint32(hdr[80:])
	entrySize := le.Uint32(hdr[84:])
	if count == 0 || count > gptMaxEntries {
		return nil, fmt.Errorf("GPT header: %d entries, want 1 to %d", count, gptMaxEntries)
	}
	if entrySize < gptMinEntrySize || entrySize > gptMaxEntrySize || entrySize%8 != 0 {
		return nil, fmt.Errorf("GPT header: entry size %d, want a multiple of 8 from %d to %d", entrySize, gptMinEntrySize, gptMaxEntrySize)
	}
	sectors := uint64(diskSize / sectorSize)
	tableLen := int64(count) * int64(entrySize)
	if entriesLBA < 2 || entriesLBA >= sectors || uint64(tableLen) > (sectors-entriesLBA)*sectorSize {
		return nil, fmt.Errorf("GPT header: entries at LBA %d (%d bytes), beyond the disk's %d sectors", entriesLBA, tableLen, sectors)
	}
	table := make([]byte, tableLen)
	if _, err := r.ReadAt(table, int64(entriesLBA)*sectorSize); err != nil {
		return nil, fmt.Errorf("read GPT entries: %w", err)
	}
	var parts []Partition
	for i := range int(count) {
		e := table[i*int(entrySize) : (i+1)*int(entrySize)]
		if isZero(e[:16]) { // unused entry: no type GUID
			continue
		}
		first, last := le.Uint64(e[32:]), le.Uint64(e[40:])
		if first == 0 || last < first || last >= sectors {
			return nil, fmt.Errorf("GPT entry %d: sectors %d to %d, beyond the disk's %d", i, first, last, sectors)
		}
		parts = append(parts, Partition{
			Name:   partitionName(e[gptNameOffset : gptNameOffset+2*gptNameMaxUnits]),
			Offset: int64(first) * sectorSize,
			Size:   int64(last-first+1) * sectorSize,
		})
	}
	return parts, nil
}

// partitionName decodes a GPT name: UTF-16LE, NUL-terminated.
func partitionName(b []byte) string {
	units := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		u := binary.LittleEndian.Uint16(b[i:])
		if u == 0 {
			break
		}
		units = append(units, u)
	}
	s := string(utf16.Decode(units))
	if len(s) > maxPartitionName {
		s = s[:maxPartitionName]
	}
	return s
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
