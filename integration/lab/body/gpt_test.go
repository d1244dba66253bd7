package body

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/harmonykaas/harmony/internal/procfs"
)

// gptDisk makes a disk of the given sectors with a primary GPT holding the
// given named partitions (first, last LBA).
func gptDisk(sectors int, parts map[string][2]uint64) []byte {
	disk := make([]byte, sectors*sectorSize)
	le := binary.LittleEndian
	hdr := disk[sectorSize:]
	copy(hdr, gptSignature)
	le.PutUint64(hdr[72:], 2)   // entries at LBA 2
	le.PutUint32(hdr[80:], 128) // entries
	le.PutUint32(hdr[84:], 128) // entry size
	i := 0
	for name, lba := range parts {
		e := disk[2*sectorSize+i*128:]
		e[0] = 1 // a non-zero type GUID
		le.PutUint64(e[32:], lba[0])
		le.PutUint64(e[40:], lba[1])
		for j, u := range utf16.Encode([]rune(name)) {
			le.PutUint16(e[56+2*j:], u)
		}
		i++
	}
	return disk
}

func TestFindPartition(t *testing.T) {
	disk := gptDisk(100, map[string][2]uint64{"EFI system": {34, 39}, "root": {40, 99}})
	p, err := findPartition(bytes.NewReader(disk), int64(len(disk)), "root")
	if err != nil {
		t.Fatal(err)
	}
	if p.Offset != 40*512 || p.Size != 60*512 || p.Name != "root" {
		t.Errorf("root = %+v", p)
	}
	if _, err := findPartition(bytes.NewReader(disk), int64(len(disk)), "home"); err == nil || !strings.Contains(err.Error(), `"root"`) {
		t.Errorf("missing partition: %v, want an error naming the ones there are", err)
	}
}

func TestReadGPTRefuses(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		name  string
		spoil func(d []byte)
		msg   string
	}{
		{"no signature", func(d []byte) { d[512] = 'X' }, "signature"},
		{"no entries", func(d []byte) { le.PutUint32(d[512+80:], 0) }, "entries"},
		{"too many entries", func(d []byte) { le.PutUint32(d[512+80:], 1<<20) }, "entries"},
		{"odd entry size", func(d []byte) { le.PutUint32(d[512+84:], 100) }, "entry size"},
		{"table past the end", func(d []byte) { le.PutUint64(d[512+72:], 99) }, "beyond"},
		{"partition past the end", func(d []byte) { le.PutUint64(d[1024+40:], 1000) }, "beyond"},
		{"partition ends before it starts", func(d []byte) { le.PutUint64(d[1024+40:], 10) }, "beyond"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := gptDisk(100, map[string][2]uint64{"root": {40, 99}})
			tc.spoil(disk)
			if _, err := readGPT(bytes.NewReader(disk), int64(len(disk))); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want one with %q", err, tc.msg)
			}
		})
	}
	// A disk too short for a header.
	if _, err := readGPT(bytes.NewReader(make([]byte, 600)), 600); err == nil {
		t.Error("a 600-byte disk parsed")
	}
}

func TestParseMountinfo(t *testing.T) {
	m, err := procfs.ParseMountinfo(`42 27 7:3 / /tmp/a\040b/root ro,relatime shared:1 master:2 - ext4 /dev/loop3 ro`)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != 42 || m.Major != 7 || m.Minor != 3 || m.Point != "/tmp/a b/root" || m.Options != "ro,relatime" || m.FSType != "ext4" || m.Source != "/dev/loop3" {
		t.Errorf("parsed %+v", m)
	}
	for _, bad := range []string{"", "1 2 3", "x 27 7:3 / /a ro - ext4 src ro", "1 27 73 / /a ro - ext4 src ro", "1 27 7:3 / /a ro ext4 src ro"} {
		if _, err := procfs.ParseMountinfo(bad); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestOnlyRunning(t *testing.T) {
	jobs := []byte("2 multi-user.target start waiting\n80 harmony-agent.service start running\n")
	if !onlyRunning(jobs, []string{"harmony-agent.service"}) {
		t.Error("only the agent runs, and it is allowed")
	}
	if onlyRunning(jobs, nil) {
		t.Error("the agent runs and is not allowed")
	}
	if !onlyRunning(nil, nil) {
		t.Error("no jobs at all")
	}
}

func TestSpecArgs(t *testing.T) {
	s := Spec{Name: "m1", ImageRoot: "/c/root", StateDir: "/s/m:1", Netns: "ns1", GuestinfoDir: "/s/gi", RPCTool: "/bin/tool",
		Binds: []Bind{{Host: "/data", ReadOnly: true}, {Host: "/h/rw", Body: "/var/rw"}}}
	got := strings.Join(s.nspawnArgs(), " ")
	for _, want := range []string{
		"--kill-signal=SIGRTMIN+3", "--directory=/c/root", `--overlay=/c/root:/s/m\:1/upper:/`, "--machine=m1", "--hostname=m1",
		"--network-namespace-path=/run/netns/ns1", "--register=no", "--keep-unit",
		"--bind=/s/gi:/run/harmony-lab", "--bind-ro=/bin/tool:/usr/bin/vmware-rpctool",
		"--bind-ro=/data:/data", "--bind=/h/rw:/var/rw",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("nspawn args %q lack %q", got, want)
		}
	}
	// The body's init comes last, after the options.
	args := s.nspawnArgs()
	if i := slices.Index(args, "--"); i < 0 || !slices.Equal(args[i+1:], bodyInit()) || slices.Contains(args, "--boot") {
		t.Errorf("nspawn args %q do not end in -- and the body's init", args)
	}
	for _, bad := range []string{"", "-x", "a b", "a/b", strings.Repeat("a", 65)} {
		s := Spec{Name: bad}
		if err := s.check(); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
}

func TestFindOVA(t *testing.T) {
	dir := t.TempDir()
	if _, err := FindOVA(dir, "harmony-node"); err == nil {
		t.Error("found an OVA in an empty directory")
	}
	now := time.Now()
	for i, name := range []string{"harmony-node-old.ova", "harmony-node-new.ova", "harmony-control-plane-newest.ova", "harmony-node-x.ovf"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		mt := now.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FindOVA(dir, "harmony-node")
	if err != nil || filepath.Base(got) != "harmony-node-new.ova" {
		t.Errorf("FindOVA = %q, %v; want the newest node OVA", got, err)
	}
}
