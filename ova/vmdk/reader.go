package vmdk

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
)

// Limits on what the reader accepts, so that no file, however crafted, makes
// it allocate much more than the file's own size.
const (
	maxGrainSectors      = 2048 // 1 MiB grains
	maxDescriptorSectors = 128
)

// Reader reads the virtual disk inside a sparse VMDK extent: a
// streamOptimized one, or a monolithicSparse one with uncompressed grains.
// It is safe for concurrent use.
type Reader struct {
	r        io.ReaderAt
	size     int64 // of the VMDK file
	hdr      header
	desc     string
	gd       []uint32
	grainLen int64 // bytes

	mu       sync.Mutex
	gtIndex  int64 // which grain table gt holds; -1 for none
	gt       []uint32
	grainIdx int64 // which grain grain holds; -1 for none
	grain    []byte
	comp     []byte
}

// NewReader checks the VMDK of the given size in r and returns a reader of
// its virtual disk. The size is needed because a streamOptimized file's
// footer, which says where the grain directory is, sits at its end.
func NewReader(r io.ReaderAt, size int64) (*Reader, error) {
	if size < sectorSize || size%sectorSize != 0 {
		return nil, fmt.Errorf("file size: %d, want a positive multiple of %d", size, sectorSize)
	}
	rd := &Reader{r: r, size: size, gtIndex: -1, grainIdx: -1}
	b := make([]byte, sectorSize)
	if err := rd.readAt(b, 0, "header"); err != nil {
		return nil, err
	}
	hdr, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	if hdr.GDOffset == gdAtEnd {
		if hdr, err = rd.footer(hdr); err != nil {
			return nil, err
		}
	}
	if err := rd.validate(&hdr); err != nil {
		return nil, err
	}
	rd.hdr = hdr
	rd.grainLen = int64(hdr.GrainSize) * sectorSize
	if err := rd.readDescriptor(); err != nil {
		return nil, err
	}
	if err := rd.readGD(); err != nil {
		return nil, err
	}
	return rd, nil
}

// footer reads the footer that a streamOptimized file ends with: a footer
// marker, the footer (a header with the real gdOffset) and the end-of-stream
// marker.
func (rd *Reader) footer(hdr header) (header, error) {
	if hdr.Flags&flagMarkers == 0 {
		return header{}, errors.New("header gdOffset: at the end of the stream, but the header has no markers flag")
	}
	if rd.size < 4*sectorSize {
		return header{}, fmt.Errorf("file size: %d bytes, too short for a footer", rd.size)
	}
	b := make([]byte, 3*sectorSize)
	if err := rd.readAt(b, rd.size-3*sectorSize, "footer"); err != nil {
		return header{}, err
	}
	le := binary.LittleEndian
	if le.Uint32(b[8:]) != 0 || le.Uint32(b[12:]) != markerFooter {
		return header{}, errors.New("footer marker: missing before the footer")
	}
	eos := b[2*sectorSize:]
	if le.Uint64(eos) != 0 || le.Uint32(eos[8:]) != 0 || le.Uint32(eos[12:]) != markerEOS {
		return header{}, errors.New("end-of-stream marker: missing at the end of the file")
	}
	f, err := parseHeader(b[sectorSize : 2*sectorSize])
	if err != nil {
		return header{}, fmt.Errorf("footer: %w", err)
	}
	if f.GDOffset == gdAtEnd {
		return header{}, errors.New("footer gdOffset: still says at the end of the stream")
	}
	return f, nil
}

// validate checks every header field the reader relies on.
func (rd *Reader) validate(h *header) error {
	sectors := uint64(rd.size / sectorSize)
	if h.Version < 1 || h.Version > 3 {
		return fmt.Errorf("header version: %d, want 1 to 3", h.Version)
	}
	if h.GrainSize < 8 || h.GrainSize > maxGrainSectors || bits.OnesCount64(h.GrainSize) != 1 {
		return fmt.Errorf("header grainSize: %d sectors, want a power of two from 8 to %d", h.GrainSize, maxGrainSectors)
	}
	if h.NumGTEsPerGT != gtesPerGT {
		return fmt.Errorf("header numGTEsPerGT: %d, want %d", h.NumGTEsPerGT, gtesPerGT)
	}
	if h.Capacity == 0 || h.Capacity > maxCapacity/sectorSize {
		return fmt.Errorf("header capacity: %d sectors, want 1 to %d", h.Capacity, maxCapacity/sectorSize)
	}
	if h.Flags&flagCompressed != 0 {
		if h.CompressAlgorithm != compressDeflate {
			return fmt.Errorf("header compressAlgorithm: %d, want %d (deflate)", h.CompressAlgorithm, compressDeflate)
		}
		if h.Flags&flagMarkers == 0 {
			return errors.New("header flags: compressed grains without markers are not supported")
		}
	}
	if h.DescriptorOffset != 0 {
		if h.DescriptorSize > maxDescriptorSectors {
			return fmt.Errorf("header descriptorSize: %d sectors, want at most %d", h.DescriptorSize, maxDescriptorSectors)
		}
		if h.DescriptorOffset >= sectors || h.DescriptorSize > sectors-h.DescriptorOffset {
			return fmt.Errorf("header descriptorOffset: sectors %d+%d, beyond the file's %d", h.DescriptorOffset, h.DescriptorSize, sectors)
		}
	}
	gdSectors := (rd.numGTs(h)*4 + sectorSize - 1) / sectorSize
	if h.GDOffset == 0 || h.GDOffset >= sectors || gdSectors > sectors-h.GDOffset {
		return fmt.Errorf("header gdOffset: sectors %d+%d, beyond the file's %d", h.GDOffset, gdSectors, sectors)
	}
	return nil
}

func (rd *Reader) numGTs(h *header) uint64 {
	grains := (h.Capacity + h.GrainSize - 1) / h.GrainSize
	return (grains + gtesPerGT - 1) / gtesPerGT
}

func (rd *Reader) readDescriptor() error {
	if rd.hdr.DescriptorOffset == 0 || rd.hdr.DescriptorSize == 0 {
		return nil
	}
	b := make([]byte, rd.hdr.DescriptorSize*sectorSize)
	if err := rd.readAt(b, int64(rd.hdr.DescriptorOffset)*sectorSize, "descriptor"); err != nil {
		return err
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	rd.desc = string(b)
	return nil
}

func (rd *Reader) readGD() error {
	n := rd.numGTs(&rd.hdr)
	b := make([]byte, n*4) // within the file: validate checked
	if err := rd.readAt(b, int64(rd.hdr.GDOffset)*sectorSize, "grain directory"); err != nil {
		return err
	}
	rd.gd = make([]uint32, n)
	sectors := uint64(rd.size / sectorSize)
	for i := range rd.gd {
		e := binary.LittleEndian.Uint32(b[i*4:])
		if e != 0 && (uint64(e) >= sectors || gtesPerGT*4/sectorSize > sectors-uint64(e)) {
			return fmt.Errorf("grain directory entry %d: sector %d, beyond the file's %d", i, e, sectors)
		}
		rd.gd[i] = e
	}
	return nil
}

// Capacity is the virtual disk's size in bytes.
func (rd *Reader) Capacity() int64 { return int64(rd.hdr.Capacity) * sectorSize }

// Descriptor is the embedded text descriptor, empty if there is none.
func (rd *Reader) Descriptor() string { return rd.desc }

// ReadAt reads the virtual disk; unallocated grains read as zeros.
func (rd *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: negative offset", off)
	}
	capacity := rd.Capacity()
	if off >= capacity {
		return 0, io.EOF
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	n := 0
	for n < len(p) && off < capacity {
		idx := off / rd.grainLen
		g, err := rd.loadGrain(idx)
		if err != nil {
			return n, err
		}
		in := off - idx*rd.grainLen
		c := copy(p[n:], g[in:min(rd.grainLen, capacity-idx*rd.grainLen)])
		n += c
		off += int64(c)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteTo writes the whole virtual disk to w.
func (rd *Reader) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, rd.grainLen)
	var written int64
	for written < rd.Capacity() {
		n, err := rd.ReadAt(buf[:min(rd.grainLen, rd.Capacity()-written)], written)
		if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
			return written, err
		}
		m, err := w.Write(buf[:n])
		written += int64(m)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

var errZeroGrain = errors.New("zero grain")

// loadGrain returns grain idx's bytes, grainLen long; the caller holds mu.
func (rd *Reader) loadGrain(idx int64) ([]byte, error) {
	if rd.grainIdx == idx {
		return rd.grain, nil
	}
	if rd.grain == nil {
		rd.grain = make([]byte, rd.grainLen)
	}
	rd.grainIdx = -1
	err := rd.decodeGrain(idx)
	if errors.Is(err, errZeroGrain) {
		clear(rd.grain)
	} else if err != nil {
		return nil, err
	}
	rd.grainIdx = idx
	return rd.grain, nil
}

func (rd *Reader) decodeGrain(idx int64) error {
	sector, err := rd.gte(idx)
	if err != nil {
		return err
	}
	if sector == 0 || (sector == 1 && rd.hdr.Flags&flagZeroedGrain != 0) {
		return errZeroGrain
	}
	off := int64(sector) * sectorSize
	if rd.hdr.Flags&flagCompressed == 0 {
		return rd.readAt(rd.grain, off, fmt.Sprintf("grain %d", idx))
	}
	var m [grainMarkerSize]byte
	if err := rd.readAt(m[:], off, fmt.Sprintf("grain %d marker", idx)); err != nil {
		return err
	}
	if lba := binary.LittleEndian.Uint64(m[0:]); lba != uint64(idx)*rd.hdr.GrainSize {
		return fmt.Errorf("grain %d marker lba: %d, want %d", idx, lba, uint64(idx)*rd.hdr.GrainSize)
	}
	// zlib can grow incompressible data a little; twice the grain is plenty.
	size := int64(binary.LittleEndian.Uint32(m[8:]))
	if size == 0 || size > 2*rd.grainLen || size > rd.size-off-grainMarkerSize {
		return fmt.Errorf("grain %d marker size: %d bytes, want 1 to %d within the file", idx, size, 2*rd.grainLen)
	}
	if int64(cap(rd.comp)) < size {
		rd.comp = make([]byte, size)
	}
	comp := rd.comp[:size]
	if err := rd.readAt(comp, off+grainMarkerSize, fmt.Sprintf("grain %d", idx)); err != nil {
		return err
	}
	zr, err := zlib.NewReader(bytes.NewReader(comp))
	if err != nil {
		return fmt.Errorf("grain %d: inflate: %w", idx, err)
	}
	n, err := io.ReadFull(zr, rd.grain)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		// A short grain (the disk's last) is padded with zeros.
		clear(rd.grain[n:])
	case err != nil:
		return fmt.Errorf("grain %d: inflate: %w", idx, err)
	default:
		var one [1]byte
		if k, _ := zr.Read(one[:]); k > 0 {
			return fmt.Errorf("grain %d: inflates to more than the grain size %d", idx, rd.grainLen)
		}
	}
	return nil
}

// gte returns the grain table entry for grain idx.
func (rd *Reader) gte(idx int64) (uint32, error) {
	t := idx / gtesPerGT
	if t >= int64(len(rd.gd)) {
		return 0, fmt.Errorf("grain %d: beyond the grain directory", idx)
	}
	if rd.gd[t] == 0 {
		return 0, nil
	}
	if rd.gtIndex != t {
		b := make([]byte, gtesPerGT*4)
		if err := rd.readAt(b, int64(rd.gd[t])*sectorSize, fmt.Sprintf("grain table %d", t)); err != nil {
			return 0, err
		}
		if rd.gt == nil {
			rd.gt = make([]uint32, gtesPerGT)
		}
		for i := range rd.gt {
			rd.gt[i] = binary.LittleEndian.Uint32(b[i*4:])
		}
		rd.gtIndex = t
	}
	e := rd.gt[idx%gtesPerGT]
	if e > 1 && int64(e) >= rd.size/sectorSize {
		return 0, fmt.Errorf("grain table %d entry %d: sector %d, beyond the file", t, idx%gtesPerGT, e)
	}
	return e, nil
}

func (rd *Reader) readAt(b []byte, off int64, what string) error {
	if off < 0 || off > rd.size || int64(len(b)) > rd.size-off {
		return fmt.Errorf("%s: bytes %d+%d, beyond the file's %d", what, off, len(b), rd.size)
	}
	n, err := rd.r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %s: %w", what, err)
}
