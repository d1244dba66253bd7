package vmdk

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testDiskSize is 64 MiB plus three sectors, so the last grain is partial.
const testDiskSize = 64<<20 + 3*sectorSize

// makeRawDisk writes a sparse raw disk: random data, explicit zero runs, holes
// and a short last grain. It returns the path and the number of grains that
// hold non-zero bytes.
func makeRawDisk(t *testing.T, dir string, seed uint64) (string, int64) {
	t.Helper()
	path := filepath.Join(dir, "disk.raw")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(testDiskSize); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	writes := []struct {
		off  int64
		data []byte
	}{
		{0, random(3 << 20)}, // random, incompressible
		{4 << 20, bytes.Repeat([]byte("harmony "), 1<<17)}, // compressible
		{6 << 20, make([]byte, 2<<20)},                     // written zeros: must be skipped
		{10<<20 + 100, random(1000)},                       // straddles no grain boundary
		{20<<20 - 10, random(20)},                          // straddles a grain boundary
		{40 << 20, random(5 << 20)},                        // in the second grain table
		{testDiskSize - 512, random(512)},                  // the short last grain
	}
	for _, w := range writes {
		if _, err := f.WriteAt(w.data, w.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var grains int64
	for off := 0; off < len(raw); off += grainBytes {
		if !isZero(raw[off:min(off+grainBytes, len(raw))]) {
			grains++
		}
	}
	return path, grains
}

func writeVMDK(t *testing.T, rawPath, out string, opts Options) Stats {
	t.Helper()
	src, err := os.Open(rawPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	stats, err := Write(t.Context(), dst, src, fi.Size(), opts)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return stats
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func needQemuImg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Fatal("qemu-img is required (scripts install qemu-utils)")
	}
}

func readAllVMDK(t *testing.T, path string) ([]byte, *Reader) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(f, fi.Size())
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	var buf bytes.Buffer
	n, err := r.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != r.Capacity() {
		t.Fatalf("WriteTo wrote %d bytes, capacity %d", n, r.Capacity())
	}
	return buf.Bytes(), r
}

// Our VMDK, read back by qemu-img, is the raw disk byte for byte, and
// qemu-img finds nothing wrong with it.
func TestWriteQemuReadsBack(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	raw, wantGrains := makeRawDisk(t, dir, 1)
	vmdk := filepath.Join(dir, "disk.vmdk")
	stats := writeVMDK(t, raw, vmdk, Options{Adapter: AdapterPVSCSI, VirtualHWVersion: 13})

	if stats.Grains != wantGrains {
		t.Errorf("Stats.Grains = %d, want %d (zero grains must be skipped)", stats.Grains, wantGrains)
	}
	if stats.PopulatedBytes != wantGrains*grainBytes {
		t.Errorf("Stats.PopulatedBytes = %d, want %d", stats.PopulatedBytes, wantGrains*grainBytes)
	}
	fi, err := os.Stat(vmdk)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Bytes != fi.Size() {
		t.Errorf("Stats.Bytes = %d, file is %d", stats.Bytes, fi.Size())
	}

	run(t, "qemu-img", "check", "-f", "vmdk", vmdk)

	var info struct {
		VirtualSize  int64 `json:"virtual-size"`
		Format       string
		FormatDetail struct {
			Data struct {
				CreateType string `json:"create-type"`
				Extents    []struct {
					Compressed bool
				}
			}
		} `json:"format-specific"`
	}
	if err := json.Unmarshal([]byte(run(t, "qemu-img", "info", "--output=json", "-f", "vmdk", vmdk)), &info); err != nil {
		t.Fatal(err)
	}
	if info.VirtualSize != testDiskSize || info.FormatDetail.Data.CreateType != "streamOptimized" ||
		len(info.FormatDetail.Data.Extents) != 1 || !info.FormatDetail.Data.Extents[0].Compressed {
		t.Errorf("qemu-img info: %+v, want a compressed streamOptimized disk of %d bytes", info, testDiskSize)
	}

	back := filepath.Join(dir, "back.raw")
	run(t, "qemu-img", "convert", "-f", "vmdk", "-O", "raw", vmdk, back)
	want := mustRead(t, raw)
	if got := mustRead(t, back); !bytes.Equal(got, want) {
		t.Fatalf("qemu-img read back %d bytes that differ from the %d-byte input at %d", len(got), len(want), firstDiff(got, want))
	}

	// And our own reader agrees.
	got, r := readAllVMDK(t, vmdk)
	if !bytes.Equal(got, want) {
		t.Fatalf("our reader differs from the input at %d", firstDiff(got, want))
	}
	for _, line := range []string{`createType="streamOptimized"`, `ddb.adapterType = "pvscsi"`, `ddb.virtualHWVersion = "13"`} {
		if !strings.Contains(r.Descriptor(), line) {
			t.Errorf("descriptor lacks %s:\n%s", line, r.Descriptor())
		}
	}
	if r.hdr.Version != 3 {
		t.Errorf("header version %d, ESXi needs 3", r.hdr.Version)
	}
}

// A disk qemu-img wrote as streamOptimized reads back identical through ours.
func TestReadQemuStreamOptimized(t *testing.T) {
	needQemuImg(t)
	dir := t.TempDir()
	raw, _ := makeRawDisk(t, dir, 2)
	vmdk := filepath.Join(dir, "qemu.vmdk")
	run(t, "qemu-img", "convert", "-f", "raw", "-O", "vmdk", "-o", "subformat=streamOptimized", raw, vmdk)
	got, r := readAllVMDK(t, vmdk)
	if r.Capacity() != testDiskSize {
		t.Fatalf("Capacity = %d, want %d", r.Capacity(), testDiskSize)
	}
	want := mustRead(t, raw)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes that differ from the input at %d", len(got), firstDiff(got, want))
	}
	// ReadAt across a grain boundary, and past the end.
	p := make([]byte, 100)
	if _, err := r.ReadAt(p, 20<<20-50); err != nil || !bytes.Equal(p, want[20<<20-50:20<<20+50]) {
		t.Fatalf("ReadAt across a grain boundary: %v", err)
	}
	if n, err := r.ReadAt(p, testDiskSize-10); n != 10 || !errors.Is(err, io.EOF) {
		t.Fatalf("ReadAt past the end: %d, %v; want 10, EOF", n, err)
	}
}

// The same input gives the same bytes, whatever the number of workers; a
// different input gives a different CID.
func TestWriteDeterministic(t *testing.T) {
	dir := t.TempDir()
	raw, _ := makeRawDisk(t, dir, 3)
	a := filepath.Join(dir, "a.vmdk")
	b := filepath.Join(dir, "b.vmdk")
	c := filepath.Join(dir, "c.vmdk")
	writeVMDK(t, raw, a, Options{})
	writeVMDK(t, raw, b, Options{Workers: 1})
	writeVMDK(t, raw, c, Options{Workers: 7})
	ab, bb, cb := mustRead(t, a), mustRead(t, b), mustRead(t, c)
	if !bytes.Equal(ab, bb) || !bytes.Equal(ab, cb) {
		t.Fatalf("same input, different output: differ at %d / %d", firstDiff(ab, bb), firstDiff(ab, cb))
	}

	// A stream gets its CID from a read pass before the grains, a file
	// has it rewritten after them: the same bytes either way, also for a
	// file the VMDK does not start at the beginning of.
	in, err := os.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := Write(t.Context(), struct{ io.Writer }{&stream}, in, fi.Size(), Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stream.Bytes(), ab) {
		t.Fatalf("a stream and a file differ at %d", firstDiff(stream.Bytes(), ab))
	}
	prefixed, err := os.Create(filepath.Join(dir, "prefixed"))
	if err != nil {
		t.Fatal(err)
	}
	defer prefixed.Close()
	prefix := []byte("tar header stand-in")
	if _, err := prefixed.Write(prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(t.Context(), prefixed, in, fi.Size(), Options{}); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, prefixed.Name()); !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], ab) {
		t.Fatalf("written after a prefix, the VMDK differs at %d", firstDiff(got[len(prefix):], ab))
	}

	other := t.TempDir()
	raw2, _ := makeRawDisk(t, other, 4)
	d := filepath.Join(other, "d.vmdk")
	writeVMDK(t, raw2, d, Options{})
	if cid(t, ab) == cid(t, mustRead(t, d)) {
		t.Fatalf("different content, same CID %s", cid(t, ab))
	}
}

func cid(t *testing.T, vmdk []byte) string {
	t.Helper()
	for _, line := range strings.Split(string(vmdk[sectorSize:2*sectorSize]), "\n") {
		if v, ok := strings.CutPrefix(line, "CID="); ok {
			return v
		}
	}
	t.Fatal("no CID in the descriptor")
	return ""
}

func TestWriteRejectsBadInput(t *testing.T) {
	src := bytes.NewReader(make([]byte, 4096))
	for _, tc := range []struct {
		size int64
		opts Options
		want string
	}{
		{1000, Options{}, "size"},
		{0, Options{}, "size"},
		{4096, Options{Adapter: "ide"}, "adapter"},
		{4096, Options{VirtualHWVersion: 3}, "virtual hardware version"},
		{4096, Options{ExtentName: "a\"b"}, "extent name"},
		{4096, Options{Level: 10}, "level"},
		{4096, Options{Workers: -1}, "workers"},
		{8192, Options{}, "read source"}, // src is shorter than size
	} {
		_, err := Write(t.Context(), io.Discard, src, tc.size, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(size %d, %+v) = %v, want an error about %s", tc.size, tc.opts, err, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Write(ctx, io.Discard, src, 4096, Options{CID: 7}); !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context = %v, want context.Canceled", err)
	}
}

// smallVMDK is a 1 MiB disk with a few grains, for corruption and fuzz tests.
func smallVMDK(t testing.TB) []byte {
	raw := make([]byte, 1<<20)
	copy(raw[100:], "some data")
	copy(raw[300<<10:], bytes.Repeat([]byte{0xab}, 70000))
	var out bytes.Buffer
	if _, err := Write(context.Background(), &out, bytes.NewReader(raw), int64(len(raw)), Options{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Truncated or corrupted files give errors that name the field, not panics.
func TestReadCorrupt(t *testing.T) {
	good := smallVMDK(t)
	if _, err := NewReader(bytes.NewReader(good), int64(len(good))); err != nil {
		t.Fatalf("the good file: %v", err)
	}
	le := binary.LittleEndian
	footer := len(good) - 2*sectorSize
	gdOffset := int(le.Uint64(good[footer+56:])) * sectorSize
	gtOffset := int(le.Uint32(good[gdOffset:])) * sectorSize
	firstGrain := int(le.Uint32(good[gtOffset:])) * sectorSize

	for name, tc := range map[string]struct {
		mutate func(b []byte) []byte
		want   string
	}{
		"truncated":        {func(b []byte) []byte { return b[:len(b)-sectorSize] }, "footer"},
		"truncated header": {func(b []byte) []byte { return b[:100] }, "file size"},
		"magic":            {func(b []byte) []byte { b[0] = 'X'; return b }, "magic"},
		"footer version":   {func(b []byte) []byte { le.PutUint32(b[footer+4:], 9); return b }, "version"},
		"grain size":       {func(b []byte) []byte { le.PutUint64(b[footer+20:], 100); return b }, "grainSize"},
		"capacity":         {func(b []byte) []byte { le.PutUint64(b[footer+12:], 1<<62); return b }, "capacity"},
		"gd offset":        {func(b []byte) []byte { le.PutUint64(b[footer+56:], 1<<40); return b }, "gdOffset"},
		"gd entry":         {func(b []byte) []byte { le.PutUint32(b[gdOffset:], 1<<30); return b }, "grain directory entry 0"},
		"gt entry":         {func(b []byte) []byte { le.PutUint32(b[gtOffset:], 1<<30); return b }, "grain table 0 entry 0"},
		"grain lba":        {func(b []byte) []byte { le.PutUint64(b[firstGrain:], 5); return b }, "grain 0 marker lba"},
		"grain size field": {func(b []byte) []byte { le.PutUint32(b[firstGrain+8:], 1<<31); return b }, "grain 0 marker size"},
		"grain data":       {func(b []byte) []byte { copy(b[firstGrain+12:], "garbage!"); return b }, "grain 0: inflate"},
		"descriptor size":  {func(b []byte) []byte { le.PutUint64(b[footer+36:], 1<<20); return b }, "descriptorSize"},
		"compression":      {func(b []byte) []byte { le.PutUint16(b[footer+77:], 2); return b }, "compressAlgorithm"},
	} {
		t.Run(name, func(t *testing.T) {
			b := tc.mutate(bytes.Clone(good))
			r, err := NewReader(bytes.NewReader(b), int64(len(b)))
			if err == nil {
				_, err = r.WriteTo(io.Discard)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// compactVMDK is a two-grain streamOptimized disk with no padding after the
// descriptor: a few kilobytes, so the fuzzer can mutate and minimize it fast.
func compactVMDK(t testing.TB) []byte {
	var out bytes.Buffer
	hdr := header{Version: 3, Flags: flagNewLineTest | flagCompressed | flagMarkers, Capacity: 256,
		GrainSize: 128, DescriptorOffset: 1, DescriptorSize: 1, NumGTEsPerGT: gtesPerGT,
		GDOffset: gdAtEnd, OverHead: 2, CompressAlgorithm: compressDeflate}
	out.Write(hdr.marshal())
	desc := make([]byte, sectorSize)
	copy(desc, descriptor(256, &Options{CID: 1, ExtentName: "d.vmdk", Adapter: AdapterLSILogic, VirtualHWVersion: 4}))
	out.Write(desc)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(bytes.Repeat([]byte("grain one "), 100))
	zw.Close()
	le := binary.LittleEndian
	out.Write(le.AppendUint32(le.AppendUint64(nil, 128), uint32(z.Len()))) // grain 1 at lba 128
	out.Write(z.Bytes())
	out.Write(make([]byte, sectorSize-(grainMarkerSize+z.Len())%sectorSize))
	out.Write(metaMarker(4, markerGT))
	gtSector := out.Len() / sectorSize
	gt := make([]byte, 4*sectorSize)
	le.PutUint32(gt[4:], 2)
	out.Write(gt)
	out.Write(metaMarker(1, markerGD))
	hdr.GDOffset = uint64(out.Len() / sectorSize)
	gd := make([]byte, sectorSize)
	le.PutUint32(gd, uint32(gtSector))
	out.Write(gd)
	out.Write(metaMarker(1, markerFooter))
	out.Write(hdr.marshal())
	out.Write(make([]byte, sectorSize))
	b := out.Bytes()
	r, err := NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("the compact seed: %v", err)
	}
	p := make([]byte, 1000)
	if _, err := r.ReadAt(p, 128*sectorSize); err != nil || !bytes.Equal(p, bytes.Repeat([]byte("grain one "), 100)) {
		t.Fatalf("the compact seed reads %q, %v", p[:20], err)
	}
	return b
}

func FuzzReadVMDK(f *testing.F) {
	f.Add(compactVMDK(f))
	f.Add(make([]byte, 2048))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		// The capacity may be terabytes of zeros; read its start and end only.
		p := make([]byte, min(r.Capacity(), 4<<20))
		r.ReadAt(p, 0)
		r.ReadAt(p[:min(len(p), 4096)], r.Capacity()-4096)
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A grain is read unless it lies wholly in a hole: touching data by one
// byte at either end counts.
func TestMayHoldData(t *testing.T) {
	d := dataExtents{{100, 200}, {1000, 1001}}
	for _, c := range []struct {
		off, n int64
		want   bool
	}{
		{0, 100, false}, {0, 101, true}, {199, 1, true}, {200, 800, false},
		{200, 801, true}, {1000, 1, true}, {1001, 5000, false}, {150, 10, true}, {0, 5000, true},
	} {
		if got := d.mayHoldData(c.off, c.n); got != c.want {
			t.Errorf("[%d, %d): %v, want %v", c.off, c.off+c.n, got, c.want)
		}
	}
	if (dataExtents{}).mayHoldData(0, 1<<30) {
		t.Error("a file with no data holds data")
	}
}

// The file system's map of a sparse test disk: data where it was
// written, none in the holes.
func TestFindDataExtents(t *testing.T) {
	raw, _ := makeRawDisk(t, t.TempDir(), 5)
	f, err := os.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, ok := findDataExtents(f, testDiskSize)
	if !ok {
		t.Skip("this file system cannot report holes")
	}
	if !d.mayHoldData(20<<20-10, 20) || !d.mayHoldData(10<<20+100, 1000) || d.mayHoldData(30<<20, 1<<20) {
		t.Errorf("extents %v miss written data or claim a hole", d)
	}
	if _, ok := findDataExtents(bytes.NewReader(nil), 0); ok {
		t.Error("a byte slice has extents")
	}
}
