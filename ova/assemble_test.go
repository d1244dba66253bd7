package ova

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
)

func testDescriptor() ovf.Descriptor {
	return ovf.Descriptor{
		Name: "harmony-node", CPUs: 2, MemoryMiB: 4096, OSType: "debian12_64Guest", Network: "nic0",
		Product: ovf.Product{Product: "Harmony node", Vendor: "Harmony", Version: "0.1.0"},
		Properties: []ovf.Property{
			{Key: "harmony.image.role", Type: ovf.TypeString, Label: "Role", Default: "node"},
			{Key: "harmony.hostname", Type: ovf.TypeString, UserConfigurable: true, Label: "Hostname"},
		},
	}
}

// rawDisk writes a 64 MiB sparse disk with data scattered through it.
func rawDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "system.raw")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	block := make([]byte, 96<<10)
	for _, off := range []int64{0, 5 << 20, 33<<20 + 512, 63 << 20} {
		for i := range block {
			block[i] = byte(rng.UintN(16)) // compressible, not zero
		}
		if _, err := f.WriteAt(block[:min(len(block), int(64<<20-off))], off); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func assemble(t *testing.T, out, raw string, mtime time.Time) *ovf.Descriptor {
	t.Helper()
	desc, err := Assemble(context.Background(), Options{
		Output:     out,
		Descriptor: testDescriptor(),
		Disks:      []SourceDisk{{ID: "system", RawPath: raw}, {ID: "data", Capacity: 256 << 20}},
		ModTime:    mtime,
	})
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	return desc
}

// The OVA assembly stage is reproducible: the same raw disk and
// SOURCE_DATE_EPOCH give the same bytes, and the epoch is what they carry.
func TestAssembleIsReproducible(t *testing.T) {
	dir := t.TempDir()
	raw := rawDisk(t, dir)
	epoch := time.Unix(1700000000, 0)
	a, b, c := filepath.Join(dir, "a.ova"), filepath.Join(dir, "b.ova"), filepath.Join(dir, "c.ova")
	assemble(t, a, raw, epoch)
	assemble(t, b, raw, epoch)
	assemble(t, c, raw, epoch.Add(time.Second))
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	cb, _ := os.ReadFile(c)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two assemblies of the same inputs differ")
	}
	if bytes.Equal(ab, cb) {
		t.Fatal("a different SOURCE_DATE_EPOCH gave the same bytes: the mtime is not carried")
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".assemble-*"))
	if len(leftovers) != 0 {
		t.Fatalf("work directories left behind: %v", leftovers)
	}
}

func TestAssembleDescribesItsDisks(t *testing.T) {
	dir := t.TempDir()
	raw := rawDisk(t, dir)
	out := filepath.Join(dir, "node.ova")
	desc := assemble(t, out, raw, time.Unix(1700000000, 0))

	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	contents, err := archive.Validate(context.Background(), f)
	if err != nil {
		t.Fatalf("the assembled OVA does not validate: %v", err)
	}
	var names []string
	for _, e := range contents.Entries {
		names = append(names, e.Name)
	}
	want := "harmony-node.ovf harmony-node.mf harmony-node-disk1.vmdk harmony-node-disk2.vmdk"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("entries %q, want %q", got, want)
	}
	got := contents.Descriptor.Disks
	if len(got) != 2 {
		t.Fatalf("descriptor disks: %+v", got)
	}
	if got[0].ID != "system" || got[0].Capacity != 64<<20 {
		t.Errorf("system disk: %+v, want id system, capacity 64 MiB", got[0])
	}
	// Four 96 KiB runs touch 2 grains each (one straddles a boundary: 3).
	if got[0].PopulatedSize <= 0 || got[0].PopulatedSize > 1<<20 {
		t.Errorf("system disk populated size %d: want the few grains written", got[0].PopulatedSize)
	}
	if got[1].ID != "data" || got[1].Capacity != 256<<20 || got[1].PopulatedSize != 0 {
		t.Errorf("data disk: %+v, want id data, 256 MiB, nothing populated", got[1])
	}
	if desc.Disks[0].FileSize != contents.Entries[2].Size || desc.Disks[1].FileSize != contents.Entries[3].Size {
		t.Errorf("returned descriptor sizes %+v disagree with the archive %+v", desc.Disks, contents.Entries)
	}
}

func TestAssembleRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	raw := rawDisk(t, dir)
	for name, tc := range map[string]struct {
		opts Options
		want string
	}{
		"no output":      {Options{Descriptor: testDescriptor(), Disks: []SourceDisk{{ID: "a", RawPath: raw}}}, "output: empty"},
		"no disks":       {Options{Output: filepath.Join(dir, "x.ova"), Descriptor: testDescriptor()}, "disks: none"},
		"missing raw":    {Options{Output: filepath.Join(dir, "x.ova"), Descriptor: testDescriptor(), Disks: []SourceDisk{{ID: "a", RawPath: filepath.Join(dir, "nope.raw")}}}, "disks[0] (a)"},
		"odd empty disk": {Options{Output: filepath.Join(dir, "x.ova"), Descriptor: testDescriptor(), Disks: []SourceDisk{{ID: "a", Capacity: 1000}}}, "capacity 1000"},
		"bad descriptor": {Options{Output: filepath.Join(dir, "x.ova"), Descriptor: ovf.Descriptor{Name: "x"}, Disks: []SourceDisk{{ID: "a", RawPath: raw}}}, "descriptor"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Assemble(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "x.ova")); !os.IsNotExist(err) {
				t.Fatalf("a failed assembly left an output file: %v", err)
			}
		})
	}
}
