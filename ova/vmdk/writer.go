package vmdk

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/klauspost/compress/zlib"
)

// Options shape the VMDK that Write produces. The zero value is valid.
type Options struct {
	// Adapter is the ddb.adapterType: AdapterLSILogic (default) or AdapterPVSCSI.
	Adapter string
	// VirtualHWVersion is ddb.virtualHWVersion; 4 (default) lets every ESXi
	// release import the disk.
	VirtualHWVersion int
	// CID is the descriptor's content ID. 0 derives it from the disk's
	// bytes, so the same input gives the same file: while the grains are
	// compressed when dst is a file (the descriptor is rewritten in place
	// at the end), in an extra read pass before them when it is a stream.
	CID uint32
	// ExtentName is the file name in the extent line; "disk.vmdk" by default.
	ExtentName string
	// Level is the deflate level, flate.BestSpeed..flate.BestCompression;
	// 0 means flate.DefaultCompression.
	Level int
	// Workers compressing in parallel; 0 means runtime.NumCPU().
	Workers int
}

// Stats describes a written VMDK.
type Stats struct {
	// Grains is how many grains were stored (neither holes nor all zeros).
	Grains int64
	// PopulatedBytes is Grains times the grain size: the OVF populatedSize.
	PopulatedBytes int64
	// Bytes is the size of the VMDK file written.
	Bytes int64
}

const grainBytes = defaultGrainSectors * sectorSize

// maxCapacity bounds the disk size: grain table entries are 32-bit sector
// offsets, so no file can address more than 2 TiB anyway.
const maxCapacity = 2 << 40

func (o *Options) normalize() error {
	switch o.Adapter {
	case "":
		o.Adapter = AdapterLSILogic
	case AdapterLSILogic, AdapterPVSCSI:
	default:
		return fmt.Errorf("options adapter: %q, want %q or %q", o.Adapter, AdapterLSILogic, AdapterPVSCSI)
	}
	switch {
	case o.VirtualHWVersion == 0:
		o.VirtualHWVersion = 4
	case o.VirtualHWVersion < 4 || o.VirtualHWVersion > 99:
		return fmt.Errorf("options virtual hardware version: %d, want 4 to 99", o.VirtualHWVersion)
	}
	if o.ExtentName == "" {
		o.ExtentName = "disk.vmdk"
	}
	if strings.ContainsAny(o.ExtentName, "\"\\\r\n\x00/") || len(o.ExtentName) > 255 {
		return fmt.Errorf("options extent name: %q, want a plain file name", o.ExtentName)
	}
	switch {
	case o.Level == 0:
		o.Level = flate.DefaultCompression
	case o.Level < flate.BestSpeed || o.Level > flate.BestCompression:
		return fmt.Errorf("options level: %d, want %d to %d", o.Level, flate.BestSpeed, flate.BestCompression)
	}
	if o.Workers < 0 {
		return fmt.Errorf("options workers: %d, want 0 or more", o.Workers)
	}
	if o.Workers == 0 {
		o.Workers = runtime.NumCPU()
	}
	return nil
}

// Write writes the size bytes of src to dst as a streamOptimized VMDK. dst is
// written in order (it can be a pipe or a tar entry); a file (io.WriterAt
// and io.Seeker) also has its descriptor rewritten at the end, to save a
// read pass. Grains that are all zeros are not stored. The output depends
// only on src, size and opts.
func Write(ctx context.Context, dst io.Writer, src io.ReaderAt, size int64, opts Options) (Stats, error) {
	if err := opts.normalize(); err != nil {
		return Stats{}, err
	}
	if size <= 0 || size%sectorSize != 0 || size > maxCapacity {
		return Stats{}, fmt.Errorf("size: %d, want a positive multiple of %d up to %d", size, sectorSize, int64(maxCapacity))
	}
	var cid *contentID
	var patch patchable
	var base int64
	if opts.CID == 0 {
		cid = newContentID(size)
		if f, ok := dst.(patchable); ok {
			if off, err := f.Seek(0, io.SeekCurrent); err == nil {
				patch, base = f, off
			}
		}
		if patch == nil {
			if err := cid.scan(ctx, src, size); err != nil {
				return Stats{}, err
			}
			opts.CID = cid.sum()
		}
	}
	w := &streamWriter{w: bufio.NewWriterSize(dst, 1<<20)}
	capacity := uint64(size / sectorSize)
	numGrains := (capacity + defaultGrainSectors - 1) / defaultGrainSectors
	numGTs := (numGrains + gtesPerGT - 1) / gtesPerGT
	hdr := header{
		Version:           3, // ESXi refuses streamOptimized disks of an older version
		Flags:             flagNewLineTest | flagCompressed | flagMarkers,
		Capacity:          capacity,
		GrainSize:         defaultGrainSectors,
		DescriptorOffset:  descriptorOffset,
		DescriptorSize:    descriptorSectors,
		NumGTEsPerGT:      gtesPerGT,
		GDOffset:          gdAtEnd,
		OverHead:          overheadSectors,
		CompressAlgorithm: compressDeflate,
	}
	desc := descriptor(capacity, &opts)
	if len(desc) > descriptorSectors*sectorSize {
		return Stats{}, fmt.Errorf("descriptor: %d bytes, more than the %d reserved", len(desc), descriptorSectors*sectorSize)
	}
	w.write(hdr.marshal())
	w.write([]byte(desc))
	w.pad(overheadSectors * sectorSize)

	gtes := make([]uint32, numGTs*gtesPerGT)
	var stats Stats
	err := compressGrains(ctx, src, size, &opts, func(idx int64, data []byte, sum uint32) error {
		if patch != nil {
			cid.add(idx, sum)
		}
		sector := w.n / sectorSize
		if sector > math.MaxUint32 {
			return fmt.Errorf("grain %d: at sector %d, beyond what a grain table entry can address", idx, sector)
		}
		gtes[idx] = uint32(sector)
		var m [grainMarkerSize]byte
		binary.LittleEndian.PutUint64(m[0:], uint64(idx)*defaultGrainSectors)
		binary.LittleEndian.PutUint32(m[8:], uint32(len(data)))
		w.write(m[:])
		w.write(data)
		w.padSector()
		stats.Grains++
		return w.err
	})
	if err != nil {
		return Stats{}, err
	}

	// Grain tables, then the directory pointing at them. Every table is
	// written, even an empty one, so readers that expect a full directory
	// (the spec does not say a table may be left out) are satisfied.
	gd := make([]uint32, numGTs)
	gtBuf := make([]byte, gtesPerGT*4)
	for i := range numGTs {
		w.write(metaMarker(gtesPerGT*4/sectorSize, markerGT))
		gd[i] = uint32(w.n / sectorSize)
		for j, e := range gtes[i*gtesPerGT : (i+1)*gtesPerGT] {
			binary.LittleEndian.PutUint32(gtBuf[j*4:], e)
		}
		w.write(gtBuf)
	}
	if w.n/sectorSize > math.MaxUint32 {
		return Stats{}, fmt.Errorf("grain tables end at sector %d, beyond what the grain directory can address", w.n/sectorSize)
	}
	gdSectors := (numGTs*4 + sectorSize - 1) / sectorSize
	w.write(metaMarker(gdSectors, markerGD))
	hdr.GDOffset = uint64(w.n / sectorSize)
	gdBuf := make([]byte, gdSectors*sectorSize)
	for i, e := range gd {
		binary.LittleEndian.PutUint32(gdBuf[i*4:], e)
	}
	w.write(gdBuf)
	w.write(metaMarker(1, markerFooter))
	w.write(hdr.marshal())
	w.write(make([]byte, sectorSize)) // end-of-stream marker: an all-zero sector
	if w.err == nil {
		w.err = w.w.Flush()
	}
	if w.err == nil && patch != nil {
		opts.CID = cid.sum()
		final := descriptor(capacity, &opts)
		if len(final) != len(desc) {
			return Stats{}, fmt.Errorf("descriptor: %d bytes with the CID, %d without", len(final), len(desc))
		}
		_, w.err = patch.WriteAt([]byte(final), base+descriptorOffset*sectorSize)
	}
	if w.err != nil {
		return Stats{}, fmt.Errorf("write vmdk: %w", w.err)
	}
	stats.PopulatedBytes = stats.Grains * grainBytes
	stats.Bytes = w.n
	return stats, nil
}

// streamWriter counts what it writes and keeps the first error.
type streamWriter struct {
	w   *bufio.Writer
	n   int64
	err error
}

func (s *streamWriter) write(b []byte) {
	if s.err != nil {
		return
	}
	n, err := s.w.Write(b)
	s.n += int64(n)
	s.err = err
}

var zeroSector [sectorSize]byte

// pad writes zeros up to the absolute offset off.
func (s *streamWriter) pad(off int64) {
	for s.n < off && s.err == nil {
		s.write(zeroSector[:min(off-s.n, sectorSize)])
	}
}

func (s *streamWriter) padSector() {
	if r := s.n % sectorSize; r != 0 {
		s.write(zeroSector[:sectorSize-r])
	}
}

// patchable is a destination whose descriptor can be rewritten once the
// grains are written: a file.
type patchable interface {
	io.WriterAt
	io.Seeker
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// contentID derives the CID from the disk's bytes, so it changes when the
// content does and stays put when it does not: the size, then each stored
// grain's index and CRC-32C, in grain order. It is the same whether the
// grains come from the compressors or from scan.
type contentID struct{ h hash.Hash32 }

func newContentID(size int64) *contentID {
	c := &contentID{h: crc32.New(castagnoli)}
	c.h.Write(binary.LittleEndian.AppendUint64(nil, uint64(size)))
	return c
}

func (c *contentID) add(idx int64, sum uint32) {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], uint64(idx))
	binary.LittleEndian.PutUint32(b[8:], sum)
	c.h.Write(b[:])
}

func (c *contentID) sum() uint32 {
	cid := c.h.Sum32()
	if cid == 0 || cid == 0xffffffff { // reserved values: no disk, no parent
		cid = 1
	}
	return cid
}

// scan reads every grain, for a destination that cannot be rewritten.
func (c *contentID) scan(ctx context.Context, src io.ReaderAt, size int64) error {
	g := newSource(src, size).reader()
	for idx := int64(0); idx*grainBytes < size; idx++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := g.read(idx)
		if err != nil {
			return err
		}
		if b != nil {
			c.add(idx, crc32.Checksum(b, castagnoli))
		}
	}
	return nil
}

// source is the disk being written, with where its data is if it is a
// sparse file.
type source struct {
	src     io.ReaderAt
	size    int64
	extents dataExtents
	sparse  bool
}

func newSource(src io.ReaderAt, size int64) *source {
	extents, sparse := findDataExtents(src, size)
	return &source{src: src, size: size, extents: extents, sparse: sparse}
}

// reader returns a reader with its own buffer, for one goroutine.
func (s *source) reader() *grainReader {
	return &grainReader{source: s, raw: make([]byte, grainBytes)}
}

// grainReader reads grains, skipping the holes of a sparse file.
type grainReader struct {
	*source
	raw []byte
}

// read returns grain idx, or nil if it is all zeros. The slice is reused
// by the next read. The last grain of a disk that is not a whole number
// of grains is short.
func (g *grainReader) read(idx int64) ([]byte, error) {
	off := idx * grainBytes
	raw := g.raw[:min(grainBytes, g.size-off)]
	if g.sparse && !g.extents.mayHoldData(off, int64(len(raw))) {
		return nil, nil
	}
	if err := readFull(g.src, raw, off); err != nil {
		return nil, err
	}
	if isZero(raw) {
		return nil, nil
	}
	return raw, nil
}

func readFull(src io.ReaderAt, b []byte, off int64) error {
	n, err := src.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read source at %d: %w", off, err)
}

// compressed is one grain's result; data is nil for an all-zero grain.
type compressed struct {
	data []byte
	sum  uint32 // CRC-32C of the grain's raw bytes
	err  error
}

// compressGrains reads and compresses grains on opts.Workers goroutines and
// hands the non-zero ones to emit in grain order, so the output is the same
// whatever the scheduling.
func compressGrains(ctx context.Context, src io.ReaderAt, size int64, opts *Options, emit func(idx int64, data []byte, sum uint32) error) error {
	ctx, cancel := context.WithCancel(ctx)
	numGrains := (size + grainBytes - 1) / grainBytes
	type job struct {
		idx int64
		out chan compressed
	}
	jobs := make(chan job)
	// order holds each grain's result channel in grain order; its buffer
	// bounds how far the workers run ahead of the writer.
	order := make(chan chan compressed, 4*opts.Workers)

	disk := newSource(src, size)
	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newGrainCompressor(opts.Level, disk.reader())
			for j := range jobs {
				data, sum, err := c.grain(j.idx)
				j.out <- compressed{data, sum, err}
			}
		}()
	}
	go func() {
		defer close(order)
		defer close(jobs)
		for i := range numGrains {
			out := make(chan compressed, 1)
			select {
			case order <- out:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- job{i, out}:
			case <-ctx.Done():
				return
			}
		}
	}()
	// On an early return, cancel first: it frees the feeder, which closes
	// jobs, which lets the workers end.
	defer func() {
		cancel()
		wg.Wait()
	}()

	var idx int64
	for out := range order {
		var r compressed
		select {
		case r = <-out:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.err != nil {
			return r.err
		}
		if r.data != nil {
			if err := emit(idx, r.data, r.sum); err != nil {
				return err
			}
		}
		idx++
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if idx != numGrains {
		return fmt.Errorf("compressed %d grains of %d", idx, numGrains)
	}
	return nil
}

type grainCompressor struct {
	in  *grainReader
	buf bytes.Buffer
	zw  *zlib.Writer
}

func newGrainCompressor(level int, in *grainReader) *grainCompressor {
	zw, _ := zlib.NewWriterLevel(nil, level) // level was validated
	return &grainCompressor{in: in, zw: zw}
}

// grain reads grain idx and returns it zlib-compressed with the CRC-32C of
// its raw bytes, or nil if it is all zeros. A short last grain is
// compressed short; readers pad it.
func (c *grainCompressor) grain(idx int64) ([]byte, uint32, error) {
	raw, err := c.in.read(idx)
	if raw == nil || err != nil {
		return nil, 0, err
	}
	c.buf.Reset()
	c.zw.Reset(&c.buf)
	if _, err := c.zw.Write(raw); err != nil {
		return nil, 0, fmt.Errorf("compress grain %d: %w", idx, err)
	}
	if err := c.zw.Close(); err != nil {
		return nil, 0, fmt.Errorf("compress grain %d: %w", idx, err)
	}
	return bytes.Clone(c.buf.Bytes()), crc32.Checksum(raw, castagnoli), nil
}

func isZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
