package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// entry is a raw tar entry for the bounds tests, whose headers need
// formats pack does not write.
type entry struct {
	hdr  *tar.Header
	data []byte
}

func tarOf(t testing.TB, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		e.hdr.Size = int64(len(e.data))
		if e.hdr.Typeflag == 0 {
			e.hdr.Typeflag = tar.TypeReg
		}
		e.hdr.Mode = 0o644
		if err := tw.WriteHeader(e.hdr); err != nil {
			t.Fatalf("%.40q: %v", e.hdr.Name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// longNames is an archive of n empty entries with GNU long names of size
// bytes, mostly \xff, which quotes to four bytes: the costliest name.
func longNames(t testing.TB, n, size int) []byte {
	var es []entry
	for i := range n {
		suffix := fmt.Sprintf("%04d.vmdk", i)
		es = append(es, entry{hdr: &tar.Header{Name: strings.Repeat("\xff", size-len(suffix)) + suffix, Format: tar.FormatGNU}})
	}
	return tarOf(t, es)
}

// A 12 MB archive of 1 MiB GNU long names used to cost ~25 times its size
// and answer with an error several times its size.
func TestValidateLongNameFlood(t *testing.T) {
	ova := longNames(t, 12, 1<<20-16) // archive/tar's limit is 1 MiB with the NUL
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Validate(context.Background(), bytes.NewReader(ova))
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("validated")
	}
	if n := len(err.Error()); n >= 16<<10 {
		t.Errorf("error is %d bytes for a %d-byte archive", n, len(ova))
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 4*uint64(len(ova)) {
		t.Errorf("Validate allocated %d bytes for a %d-byte archive", grown, len(ova))
	}
	if !strings.Contains(err.Error(), "(1048560 bytes): longer than the 255 bytes a USTAR header holds") {
		t.Errorf("no name-length fault:\n%.2000s", err)
	}
}

func TestValidateNameLength(t *testing.T) {
	after := entry{hdr: &tar.Header{Name: "after.txt", Format: tar.FormatUSTAR}, data: []byte("x")}
	for _, c := range []struct {
		what string
		hdr  *tar.Header
		ok   bool
	}{
		{"255 bytes, GNU", &tar.Header{Name: strings.Repeat("n", 251) + ".txt", Format: tar.FormatGNU}, true},
		{"255 bytes, USTAR prefix and name", &tar.Header{Name: strings.Repeat("p", 154) + "/" + strings.Repeat("n", 96) + ".txt", Format: tar.FormatUSTAR}, true},
		{"256 bytes, GNU", &tar.Header{Name: strings.Repeat("n", 252) + ".txt", Format: tar.FormatGNU}, false},
	} {
		t.Run(c.what, func(t *testing.T) {
			if len(c.hdr.Name) != 255 && len(c.hdr.Name) != 256 {
				t.Fatalf("test setup: name is %d bytes", len(c.hdr.Name))
			}
			name := c.hdr.Name
			got, err := Validate(context.Background(), bytes.NewReader(tarOf(t, []entry{{hdr: c.hdr}, after})))
			if err == nil {
				t.Fatal("validated") // no descriptor: never valid
			}
			refused := strings.Contains(err.Error(), "longer than the 255 bytes a USTAR header holds")
			if refused == c.ok {
				t.Fatalf("refused for its length: %v, want %v\n%v", refused, !c.ok, err)
			}
			if strings.Contains(err.Error(), name) {
				t.Errorf("the error copies the whole name:\n%v", err)
			}
			if c.ok {
				if len(got.Entries) != 2 || got.Entries[1].Name != "after.txt" {
					t.Errorf("entries %v: did not read on", got.Entries)
				}
				return
			}
			want := fmt.Sprintf("entry 1: name %s… (256 bytes): longer", strconv.Quote(name[:64]))
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
			if len(got.Entries) != 0 {
				t.Errorf("entries %v: read on after a refused name", got.Entries)
			}
		})
	}
}

// valid returns the members of a valid OVA.
func valid(t *testing.T) (*fixture, []member) {
	f := newFixture(t)
	return f, members(t, f.write(t, f.options()))
}

func extras(ms []member, total int) []member {
	for i := len(ms); i < total; i++ {
		ms = append(ms, member{fmt.Sprintf("extra%03d.txt", i+1), []byte("x")})
	}
	return ms
}

func TestValidateTooManyEntries(t *testing.T) {
	_, ms := valid(t)
	ova := pack(t, extras(ms, MaxEntries+10), tar.FormatUSTAR)
	c, err := Validate(context.Background(), bytes.NewReader(ova))
	if err == nil {
		t.Fatal("validated")
	}
	if want := "entry 65: more than 64 entries, where an OVA has a descriptor, a manifest and its disks: stopped reading"; !strings.Contains(err.Error(), want) {
		t.Errorf("error lacks %q:\n%v", want, err)
	}
	if len(c.Entries) != MaxEntries {
		t.Errorf("read %d entries, want %d", len(c.Entries), MaxEntries)
	}
	if strings.Contains(err.Error(), "extra065.txt") {
		t.Errorf("read past the limit:\n%v", err)
	}

	// At the limit, no such fault.
	ova = pack(t, extras(ms, MaxEntries), tar.FormatUSTAR)
	if _, err := Validate(context.Background(), bytes.NewReader(ova)); err == nil || strings.Contains(err.Error(), "more than 64 entries") {
		t.Errorf("%d entries: %v", MaxEntries, err)
	}
}

func TestValidateFaultLimit(t *testing.T) {
	_, ms := valid(t)
	// Each extra file is neither in the manifest nor referenced: 2 faults.
	ova := pack(t, extras(ms, MaxEntries), tar.FormatUSTAR)
	_, err := Validate(context.Background(), bytes.NewReader(ova))
	if err == nil {
		t.Fatal("validated")
	}
	total := 2 * (MaxEntries - len(ms))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 1+MaxFaults+1 {
		t.Fatalf("%d lines, want a heading, %d faults and a count:\n%v", len(lines), MaxFaults, err)
	}
	if want := fmt.Sprintf("ova: %d fault(s):", total); lines[0] != want {
		t.Errorf("heading %q, want %q", lines[0], want)
	}
	if want := fmt.Sprintf("… and %d more faults", total-MaxFaults); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}
}

// One fault message is cut however long what it quotes; here the VMDK
// checker's createType fault, which quotes a line of the disk's embedded
// descriptor (up to 10 KiB).
func TestValidateFaultSize(t *testing.T) {
	_, ms := valid(t)
	d := ms[3].data[512 : 21*512]
	line := "createType=\"" + strings.Repeat("A", 8000) + "\"\n"
	copy(d, line)
	clear(d[len(line):])
	_, err := Validate(context.Background(), bytes.NewReader(pack(t, ms, tar.FormatUSTAR)))
	if err == nil {
		t.Fatal("validated")
	}
	if !strings.Contains(err.Error(), "harmony-disk2.vmdk: descriptor createType") {
		t.Fatalf("no createType fault:\n%.3000s", err)
	}
	for _, l := range strings.Split(err.Error(), "\n") {
		if len(l) > maxFaultBytes+len("… (cut)") {
			t.Errorf("a fault of %d bytes: %.200s…", len(l), l)
		}
	}
}

func TestValidateDiskCapacityLimit(t *testing.T) {
	f, ms := valid(t)
	const limit = 64 << 40
	// disk2's capacity is 64 KiB: ovf:capacity="65536" in bytes.
	old := `ovf:capacity="65536" ovf:capacityAllocationUnits="byte"`
	if !bytes.Contains(f.desc, []byte(old)) {
		t.Fatalf("test setup: %s not in the descriptor", old)
	}
	refused := "harmony-node.ovf: invalid descriptor: DiskSection/Disk[2] (disk vmdisk2) ovf:capacity "
	for _, c := range []struct {
		capacity string
		units    string
		ok       bool
	}{
		{strconv.Itoa(limit + 1), "byte", false},
		{strconv.Itoa(limit + 512), "byte", false},
		{"65", "byte * 2^40", false},
		{strconv.Itoa(limit), "byte", true},
		{"64", "byte * 2^40", true},
	} {
		t.Run(c.capacity+" "+c.units, func(t *testing.T) {
			c2 := append([]member(nil), ms...)
			c2[0].data = bytes.Replace(f.desc, []byte(old), []byte(`ovf:capacity="`+c.capacity+`" ovf:capacityAllocationUnits="`+c.units+`"`), 1)
			_, err := Validate(context.Background(), bytes.NewReader(pack(t, c2, tar.FormatUSTAR)))
			if err == nil {
				t.Fatal("validated") // the descriptor's digest changed at least
			}
			if got := strings.Contains(err.Error(), refused); got == c.ok {
				t.Errorf("refused: %v, want %v\n%v", got, !c.ok, err)
			}
			if !c.ok && !strings.Contains(err.Error(), "more than the 70368744177664 bytes (64 TiB) limit") {
				t.Errorf("the fault does not state the limit:\n%v", err)
			}
			// Accepted: the descriptor parsed and was compared with the disk.
			if want := "the descriptor's disk vmdisk2 says ovf:capacity 70368744177664"; c.ok && !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		})
	}

	// A VMDK header's capacity (in sectors) past the limit: ova/vmdk
	// refuses anything over 2 TiB, what 32-bit grain offsets address.
	c2 := append([]member(nil), ms...)
	c2[3].data = bytes.Clone(ms[3].data)
	binary.LittleEndian.PutUint64(c2[3].data[12:], limit/512+1)
	_, err := Validate(context.Background(), bytes.NewReader(pack(t, c2, tar.FormatUSTAR)))
	if err == nil || !strings.Contains(err.Error(), "harmony-disk2.vmdk: header capacity 137438953473 sectors: want 1 to") {
		t.Errorf("VMDK header of 64 TiB + 1 sector: %v", err)
	}
}

// sparse is an archive whose one entry, a.bin, is a PAX GNU sparse file of
// 1 TiB with no data: archive/tar reads it as 1 TiB of zeros.
func sparse(t testing.TB) []byte {
	rec := func(k, v string) string {
		s := " " + k + "=" + v + "\n"
		n := len(s) + 1
		for len(strconv.Itoa(n))+len(s) != n {
			n++
		}
		return strconv.Itoa(n) + s
	}
	pax := rec("GNU.sparse.size", strconv.Itoa(1<<40)) + rec("GNU.sparse.numblocks", "1") + rec("GNU.sparse.map", "0,0")
	// Written as a regular file, then retyped: the Writer drops GNU.sparse
	// records.
	data := tarOf(t, []entry{
		{hdr: &tar.Header{Name: "PaxHeader", Format: tar.FormatUSTAR}, data: []byte(pax)},
		{hdr: &tar.Header{Name: "a.bin", Format: tar.FormatUSTAR}},
	})
	data[156] = tar.TypeXHeader
	copy(data[148:156], "        ")
	sum := 0
	for _, b := range data[:512] {
		sum += int(b)
	}
	copy(data[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return data
}

func TestValidateSparseNotRead(t *testing.T) {
	ova := sparse(t)
	done := make(chan error, 1)
	go func() {
		_, err := Validate(context.Background(), bytes.NewReader(ova))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "a.bin: GNU sparse file of 1099511627776 bytes: not read") {
			t.Fatalf("got %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Validate still reading a %d-byte archive after 20s", len(ova))
	}
}

func TestManifestBounds(t *testing.T) {
	sum := strings.Repeat("0", 64)
	var b strings.Builder
	for i := range MaxEntries {
		fmt.Fprintf(&b, "SHA256(f%d)= %s\n", i, sum)
	}
	if _, es, err := ParseManifest([]byte(b.String())); err != nil || len(es) != MaxEntries {
		t.Fatalf("%d lines: %d entries, %v", MaxEntries, len(es), err)
	}
	fmt.Fprintf(&b, "SHA256(f%d)= %s\n", MaxEntries, sum)
	if _, _, err := ParseManifest([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "manifest: 65 lines, more than the 64 entries") {
		t.Errorf("%d lines: %v", MaxEntries+1, err)
	}

	// Splitting a 1 MiB manifest of short lines into lines cost 24 bytes
	// a line.
	short := bytes.Repeat([]byte("x\n"), maxManifest/2)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := ParseManifest(short)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("accepted")
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 2*maxManifest {
		t.Errorf("ParseManifest allocated %d bytes for a %d-byte manifest", grown, len(short))
	}

	// A long line is quoted in part.
	long := bytes.Repeat([]byte("y"), maxManifest)
	if _, _, err := ParseManifest(long); err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "(1048576 bytes)") {
		t.Errorf("a 1 MiB line: %.300v", err)
	}
}

// FuzzValidate: whatever the archive, Validate returns, reads at most
// MaxEntries entries and answers with an error of bounded size.
func FuzzValidate(f *testing.F) {
	f.Add(longNames(f, 3, 4096))
	f.Add(sparse(f))
	var es []entry
	for i := range MaxEntries + 2 {
		es = append(es, entry{hdr: &tar.Header{Name: fmt.Sprintf("e%d.vmdk", i), Format: tar.FormatUSTAR}, data: []byte{byte(i)}})
	}
	f.Add(tarOf(f, es))
	f.Add([]byte{})
	const maxError = (MaxFaults + 2) * (maxFaultBytes + len("… (cut)\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Validate(context.Background(), bytes.NewReader(data))
		if c != nil && len(c.Entries) > MaxEntries {
			t.Fatalf("%d entries read", len(c.Entries))
		}
		if err != nil && len(err.Error()) > maxError {
			t.Fatalf("error of %d bytes", len(err.Error()))
		}
	})
}
