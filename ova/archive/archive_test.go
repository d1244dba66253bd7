package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/ova/ovf"
	"github.com/harmonykaas/harmony/ova/vmdk"
)

// fixture is an OVA's inputs: two streamOptimized VMDKs on disk (made by
// ova/vmdk from random raw data, so Validate's header checks pass) and a
// descriptor rendered for them.
type fixture struct {
	dir   string
	disks []string
	desc  []byte
	d     *ovf.Descriptor
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	f := &fixture{dir: dir}
	var disks []ovf.Disk
	for i, size := range []int{1 << 20, 64 << 10} {
		data := make([]byte, size)
		for j := range data[:size/2] {
			data[j] = byte(rng.Uint32())
		}
		name := "harmony-disk" + strconv.Itoa(i+1) + ".vmdk"
		p := filepath.Join(dir, name)
		out, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		stats, err := vmdk.Write(context.Background(), out, bytes.NewReader(data), int64(size), vmdk.Options{ExtentName: name})
		out.Close()
		if err != nil {
			t.Fatal(err)
		}
		f.disks = append(f.disks, p)
		disks = append(disks, ovf.Disk{ID: "vmdisk" + strconv.Itoa(i+1), File: name, FileSize: stats.Bytes,
			Capacity: int64(size), PopulatedSize: stats.PopulatedBytes})
	}
	f.d = &ovf.Descriptor{
		Name: "harmony-node", HardwareVersion: 15, CPUs: 2, MemoryMiB: 4096,
		OSType: "debian12_64Guest", Network: "nic0",
		Disks:      disks,
		Properties: []ovf.Property{{Key: "version.kubelet", Type: ovf.TypeString, Default: "v1.31.0"}},
	}
	var err error
	if f.desc, err = ovf.Render(f.d); err != nil {
		t.Fatal(err)
	}
	return f
}

var epoch = time.Unix(1700000000, 0)

func (f *fixture) options() Options {
	o := Options{Name: "harmony-node", Descriptor: f.desc, ModTime: epoch}
	for _, p := range f.disks {
		o.Disks = append(o.Disks, DiskFile(p))
	}
	return o
}

func (f *fixture) write(t *testing.T, o Options) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(context.Background(), &buf, o); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriteThenValidate(t *testing.T) {
	f := newFixture(t)
	for _, h := range []Hash{SHA256, SHA1} {
		t.Run(h.String(), func(t *testing.T) {
			o := f.options()
			o.Hash = h
			ova := f.write(t, o)
			c, err := Validate(context.Background(), bytes.NewReader(ova))
			if err != nil {
				t.Fatal(err)
			}
			want := []Entry{{"harmony-node.ovf", int64(len(f.desc))}, {"harmony-node.mf", c.Entries[1].Size},
				{"harmony-disk1.vmdk", f.d.Disks[0].FileSize}, {"harmony-disk2.vmdk", f.d.Disks[1].FileSize}}
			if !reflect.DeepEqual(c.Entries, want) || c.Hash != h {
				t.Fatalf("entries %+v hash %v", c.Entries, c.Hash)
			}
			if !reflect.DeepEqual(c.Descriptor, f.d) {
				t.Fatalf("descriptor %+v", c.Descriptor)
			}
		})
	}
}

// The manifest lines are what sha256sum/sha1sum compute on the extracted
// files, and GNU tar lists the entries in order, root-owned, 0644.
func TestRealTools(t *testing.T) {
	f := newFixture(t)
	for _, h := range []Hash{SHA256, SHA1} {
		o := f.options()
		o.Hash = h
		ova := f.write(t, o)
		dir := t.TempDir()
		path := filepath.Join(dir, "x.ova")
		if err := os.WriteFile(path, ova, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("tar", "-tvf", path, "--numeric-owner").CombinedOutput()
		if err != nil {
			t.Fatalf("tar -tvf: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		names := []string{"harmony-node.ovf", "harmony-node.mf", "harmony-disk1.vmdk", "harmony-disk2.vmdk"}
		if len(lines) != len(names) {
			t.Fatalf("tar lists %d entries:\n%s", len(lines), out)
		}
		for i, l := range lines {
			if !strings.HasPrefix(l, "-rw-r--r-- 0/0 ") || !strings.HasSuffix(l, " "+names[i]) || !strings.Contains(l, "2023-11-14 22:13") {
				t.Errorf("tar line %d: %q", i, l)
			}
		}
		x := filepath.Join(dir, "x")
		os.Mkdir(x, 0o755)
		if out, err := exec.Command("tar", "-xf", path, "-C", x).CombinedOutput(); err != nil {
			t.Fatalf("tar -xf: %v\n%s", err, out)
		}
		tool := map[Hash]string{SHA256: "sha256sum", SHA1: "sha1sum"}[h]
		mf, err := os.ReadFile(filepath.Join(x, "harmony-node.mf"))
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		for _, n := range []string{"harmony-node.ovf", "harmony-disk1.vmdk", "harmony-disk2.vmdk"} {
			cmd := exec.Command(tool, n)
			cmd.Dir = x
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", tool, err)
			}
			want.WriteString(h.String() + "(" + n + ")= " + strings.Fields(string(out))[0] + "\n")
		}
		if string(mf) != want.String() {
			t.Errorf("%v manifest:\n%s\nwant (from %s):\n%s", h, mf, tool, want.String())
		}
	}
}

// Every header is a plain USTAR block: magic "ustar\x00", version "00",
// regular file, mode 0644, uid/gid 0, empty user and group names, the
// given mtime; no PAX ('x', 'g') or GNU ('L', 'K') blocks anywhere.
func TestRawUSTARHeaders(t *testing.T) {
	f := newFixture(t)
	ova := f.write(t, f.options())
	tr := tar.NewReader(bytes.NewReader(ova))
	off := int64(0)
	count := 0
	for {
		blk := ova[off : off+512]
		if bytes.Equal(blk, make([]byte, 512)) {
			break
		}
		hdr, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		count++
		field := func(a, b int) string { return strings.TrimRight(string(blk[a:b]), "\x00 ") }
		if string(blk[257:265]) != "ustar\x0000" {
			t.Errorf("%s: magic+version %q", hdr.Name, blk[257:265])
		}
		if blk[156] != '0' {
			t.Errorf("%s: typeflag %q, want '0'", hdr.Name, blk[156])
		}
		if field(100, 108) != "0000644" || field(108, 116) != "0000000" || field(116, 124) != "0000000" {
			t.Errorf("%s: mode/uid/gid %q %q %q", hdr.Name, blk[100:108], blk[108:116], blk[116:124])
		}
		if field(265, 297) != "" || field(297, 329) != "" {
			t.Errorf("%s: uname/gname %q %q", hdr.Name, blk[265:297], blk[297:329])
		}
		if m, _ := strconv.ParseInt(field(136, 148), 8, 64); m != epoch.Unix() {
			t.Errorf("%s: mtime %d", hdr.Name, m)
		}
		if field(0, 100) != hdr.Name || field(345, 500) != "" {
			t.Errorf("%s: name %q prefix %q", hdr.Name, field(0, 100), field(345, 500))
		}
		off += 512 + (hdr.Size+511)/512*512
	}
	if count != 4 {
		t.Fatalf("%d headers, want 4", count)
	}
	// End of archive: two zero blocks.
	if !bytes.Equal(ova[off:off+1024], make([]byte, 1024)) {
		t.Error("no end-of-archive marker")
	}
}

func TestDeterministic(t *testing.T) {
	f := newFixture(t)
	a := f.write(t, f.options())
	b := f.write(t, f.options())
	if !bytes.Equal(a, b) {
		t.Fatal("two OVAs from the same inputs differ")
	}
	o := f.options()
	o.ModTime = epoch.Add(time.Second)
	if bytes.Equal(a, f.write(t, o)) {
		t.Fatal("ModTime has no effect: the test would not catch a time leak")
	}
	// A timestamp from SOURCE_DATE_EPOCH gives the same archive.
	tm, err := SourceDateEpoch("1700000000")
	if err != nil {
		t.Fatal(err)
	}
	o.ModTime = tm
	if !bytes.Equal(a, f.write(t, o)) {
		t.Fatal("SourceDateEpoch(1700000000) differs from time.Unix(1700000000)")
	}
}

// member is an archive entry for crafting bad OVAs.
type member struct {
	name string
	data []byte
}

func members(t *testing.T, ova []byte) []member {
	t.Helper()
	var ms []member
	tr := tar.NewReader(bytes.NewReader(ova))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return ms
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		ms = append(ms, member{h.Name, data})
	}
}

func pack(t *testing.T, ms []member, format tar.Format) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := header(m.name, int64(len(m.data)), epoch)
		h.Format = format
		if format == tar.FormatPAX {
			h.PAXRecords = map[string]string{"comment": "x"}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(m.data)
	}
	tw.Close()
	return buf.Bytes()
}

func TestValidateFaults(t *testing.T) {
	f := newFixture(t)
	good := f.write(t, f.options())
	ms := members(t, good)
	clone := func() []member {
		c := make([]member, len(ms))
		for i, m := range ms {
			c[i] = member{m.name, bytes.Clone(m.data)}
		}
		return c
	}
	cases := []struct {
		name string
		ova  func() []byte
		want []string
	}{
		{"corrupted disk byte", func() []byte {
			c := bytes.Clone(good)
			// The second disk's data starts right after its header; flip a byte in it.
			i := bytes.Index(c, []byte("harmony-disk2.vmdk\x00"))
			c[i+512+100] ^= 0x01
			return c
		}, []string{"harmony-disk2.vmdk: SHA256 digest mismatch"}},
		{"wrong manifest line", func() []byte {
			c := clone()
			mf := string(c[1].data)
			i := strings.Index(mf, "SHA256(harmony-disk1.vmdk)= ") + len("SHA256(harmony-disk1.vmdk)= ")
			flip := "0"
			if mf[i] == '0' {
				flip = "1"
			}
			c[1].data = []byte(mf[:i] + flip + mf[i+1:])
			return pack(t, c, tar.FormatUSTAR)
		}, []string{"harmony-disk1.vmdk: SHA256 digest mismatch"}},
		{"malformed manifest", func() []byte {
			c := clone()
			c[1].data = append(c[1].data, "MD5(x)= 00\n"...)
			return pack(t, c, tar.FormatUSTAR)
		}, []string{"harmony-node.mf: manifest line 4"}},
		{"manifest before descriptor", func() []byte {
			c := clone()
			c[0], c[1] = c[1], c[0]
			return pack(t, c, tar.FormatUSTAR)
		}, []string{"harmony-node.mf: manifest is entry 1, must be second", "harmony-node.ovf: descriptor is entry 2, must be first"}},
		{"disk first", func() []byte {
			c := clone()
			c = append([]member{c[3]}, c[:3]...)
			return pack(t, c, tar.FormatUSTAR)
		}, []string{"harmony-disk2.vmdk: disk is entry 1", "harmony-node.ovf: descriptor is entry 2"}},
		{"missing disk", func() []byte {
			return pack(t, clone()[:3], tar.FormatUSTAR)
		}, []string{"harmony-disk2.vmdk: referenced by harmony-node.ovf (disk vmdisk2) but missing", "lists harmony-disk2.vmdk, which is not in the archive"}},
		{"missing manifest", func() []byte {
			c := clone()
			return pack(t, append(c[:1], c[2:]...), tar.FormatUSTAR)
		}, []string{"no .mf manifest"}},
		{"extra file", func() []byte {
			return pack(t, append(clone(), member{"notes.txt", []byte("hi")}), tar.FormatUSTAR)
		}, []string{"notes.txt: not listed in manifest", "notes.txt: in the archive but not referenced"}},
		{"pax headers", func() []byte {
			return pack(t, clone(), tar.FormatPAX)
		}, []string{"harmony-node.ovf: header format PAX, want plain USTAR"}},
		{"size differs from References", func() []byte {
			c := clone()
			c[3].data = append(c[3].data, 0)
			return pack(t, c, tar.FormatUSTAR)
		}, []string{fmt.Sprintf("harmony-disk2.vmdk: %d bytes in the archive, References ovf:size says %d", f.d.Disks[1].FileSize+1, f.d.Disks[1].FileSize), "harmony-disk2.vmdk: SHA256 digest mismatch"}},
		{"bad disk magic", func() []byte {
			c := clone()
			c[2].data[0] ^= 0xff
			return pack(t, c, tar.FormatUSTAR)
		}, []string{"harmony-disk1.vmdk: header magic", "harmony-disk1.vmdk: disk vmdisk1 has no readable VMDK header", "harmony-disk1.vmdk: SHA256 digest mismatch"}},
		{"old disk version", func() []byte {
			c := clone()
			c[2].data[4] = 1
			return pack(t, c, tar.FormatUSTAR)
		}, []string{"harmony-disk1.vmdk: header version 1: want 3", "footer: capacity"}},
		{"disk without footer", func() []byte {
			c := clone()
			d := c[3].data
			copy(d[len(d)-3*512:], make([]byte, 3*512))
			return pack(t, c, tar.FormatUSTAR)
		}, []string{"harmony-disk2.vmdk: no footer marker"}},
		{"capacity disagrees with the descriptor", func() []byte {
			c := clone()
			d := *f.d
			d.Disks = slices.Clone(f.d.Disks)
			d.Disks[1].Capacity *= 2
			desc, err := ovf.Render(&d)
			if err != nil {
				t.Fatal(err)
			}
			c[0].data = desc
			return pack(t, c, tar.FormatUSTAR)
		}, []string{fmt.Sprintf("harmony-disk2.vmdk: the VMDK header's capacity is %d bytes, the descriptor's disk vmdisk2 says ovf:capacity %d", 64<<10, 128<<10)}},
		{"hostile name", func() []byte {
			return pack(t, append(clone(), member{"evil\x1b[2J.vmdk", []byte("x")}), tar.FormatUSTAR)
		}, []string{"entry 5: name \"evil\\x1b[2J.vmdk\"", "\"evil\\x1b[2J.vmdk\": in the archive but not referenced"}},
		{"truncated", func() []byte {
			return good[:len(good)/2]
		}, []string{"harmony-disk1.vmdk: read: unexpected EOF", "harmony-disk2.vmdk: referenced by harmony-node.ovf (disk vmdisk2) but missing"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Validate(context.Background(), bytes.NewReader(c.ova()))
			if err == nil {
				t.Fatal("validated")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestWriteRefuses(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	long := strings.Repeat("a", 97) // +".ovf" = 101 bytes
	cases := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"name too long", func(o *Options) { o.Name = long }, "want 1-100 bytes"},
		{"non-ascii name", func(o *Options) { o.Name = "härmony" }, "only ASCII"},
		{"directory in disk name", func(o *Options) { o.Disks[0].Name = "a/b.vmdk" }, "disks[0]"},
		{"unknown hash", func(o *Options) { o.Hash = 7 }, "hash: unknown"},
		{"time before 1970", func(o *Options) { o.ModTime = time.Unix(-1, 0) }, "modTime"},
		{"disk not referenced", func(o *Options) { o.Disks[1] = DiskFile(f.disks[1]); o.Disks[1].Name = "other.vmdk" }, `disk "other.vmdk": not in the descriptor's References`},
		{"disk size differs", func(o *Options) {
			o.Disks[1].Open = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("short")), nil }
		}, fmt.Sprintf(`disk "harmony-disk2.vmdk": 5 bytes, References ovf:size says %d`, f.d.Disks[1].FileSize)},
		{"bad descriptor", func(o *Options) { o.Descriptor = []byte("<Envelope/>") }, "ova: descriptor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := f.options()
			c.edit(&o)
			var buf bytes.Buffer
			err := Write(ctx, &buf, o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if buf.Len() != 0 {
				t.Fatalf("wrote %d bytes before refusing", buf.Len())
			}
		})
	}
}

func TestWriteCanceled(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Write(ctx, io.Discard, f.options()); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("got %v", err)
	}
}

func TestManifest(t *testing.T) {
	s256 := sha256.Sum256([]byte("a"))
	s1 := sha1.Sum([]byte("a"))
	mf, err := FormatManifest(SHA256, []ManifestEntry{{"a.ovf", s256[:]}})
	if err != nil {
		t.Fatal(err)
	}
	if string(mf) != "SHA256(a.ovf)= "+hex.EncodeToString(s256[:])+"\n" {
		t.Fatalf("%q", mf)
	}
	h, es, err := ParseManifest(mf)
	if err != nil || h != SHA256 || len(es) != 1 || !bytes.Equal(es[0].Digest, s256[:]) {
		t.Fatalf("%v %v %v", h, es, err)
	}
	for _, bad := range []string{
		"SHA256(a.ovf)= " + hex.EncodeToString(s1[:]),                                               // wrong length
		"SHA1(a.ovf)= " + hex.EncodeToString(s1[:]) + "\nSHA256(b)= " + hex.EncodeToString(s256[:]), // mixed
		"SHA1(a.ovf)= " + hex.EncodeToString(s1[:]) + "\nSHA1(a.ovf)= " + hex.EncodeToString(s1[:]), // duplicate
		"SHA1(../a)= " + hex.EncodeToString(s1[:]),
		"",
	} {
		if _, _, err := ParseManifest([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if _, err := FormatManifest(SHA1, []ManifestEntry{{"a", s256[:]}}); err == nil {
		t.Error("SHA1 manifest accepted a 32-byte digest")
	}
}
