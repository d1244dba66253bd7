package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/ova/ovf"
)

// A real streamOptimized VMDK made by qemu-img goes into an OVA, validates,
// comes back out through GNU tar and is still the same disk to qemu-img.
func TestQemuStreamOptimizedDisk(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed (scripts/install-deps installs qemu-utils)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	data := make([]byte, 8<<20)
	copy(data[1<<20:], bytes.Repeat([]byte("harmony "), 4096))
	copy(data[5<<20:], "end of data")
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	vmdk := filepath.Join(dir, "node-disk1.vmdk")
	run := func(name string, args ...string) []byte {
		t.Helper()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return out
	}
	run("qemu-img", "convert", "-f", "raw", "-O", "vmdk", "-o", "subformat=streamOptimized", raw, vmdk)
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	if err := json.Unmarshal(run("qemu-img", "info", "--output=json", vmdk), &info); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(vmdk)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := ovf.Render(&ovf.Descriptor{
		Name: "node", CPUs: 2, MemoryMiB: 2048, OSType: "debian12_64Guest", Network: "nic0",
		Disks: []ovf.Disk{{ID: "vmdisk1", File: "node-disk1.vmdk", FileSize: st.Size(), Capacity: info.VirtualSize, PopulatedSize: 2 << 20}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ova := filepath.Join(dir, "node.ova")
	out, err := os.Create(ova)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(ctx, out, Options{Name: "node", Descriptor: desc, Disks: []Disk{DiskFile(vmdk)}}); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(ova)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	c, err := Validate(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if c.Descriptor.Disks[0].Capacity != 8<<20 {
		t.Fatalf("capacity %d", c.Descriptor.Disks[0].Capacity)
	}
	x := filepath.Join(dir, "x")
	if err := os.Mkdir(x, 0o755); err != nil {
		t.Fatal(err)
	}
	run("tar", "-xf", ova, "-C", x)
	got := filepath.Join(x, "node-disk1.vmdk")
	run("qemu-img", "check", got)
	run("qemu-img", "compare", "-f", "raw", "-F", "vmdk", raw, got)
}
