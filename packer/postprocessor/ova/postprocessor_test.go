package ova

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/harmonykaas/harmony/images/components"
	"github.com/harmonykaas/harmony/ova/archive"
)

// rawArtifact is what harmony-debootstrap hands over: a raw disk and the
// image.json copied out of it.
type rawArtifact struct{ disk, manifest string }

func (a *rawArtifact) BuilderId() string { return "harmonykaas.debootstrap" }
func (a *rawArtifact) Files() []string   { return []string{a.disk, a.manifest} }
func (a *rawArtifact) Id() string        { return "raw" }
func (a *rawArtifact) String() string    { return a.disk }
func (a *rawArtifact) State(name string) any {
	switch name {
	case "harmony.disk":
		return a.disk
	case "harmony.image_json":
		return a.manifest
	}
	return nil
}
func (a *rawArtifact) Destroy() error { return nil }

func artifact(t *testing.T, role string) *rawArtifact {
	t.Helper()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.raw")
	data := make([]byte, 32<<20)
	copy(data[1<<20:], bytes.Repeat([]byte("root file system "), 10000))
	if err := os.WriteFile(disk, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m := components.ImageManifest{
		Role: role, Version: "v0.1.0", Built: "2026-11-22T00:00:00Z",
		Components: []components.Component{
			{Name: "kubernetes", Version: "v1.34.2", Source: "module"},
			{Name: "etcd-server", Version: "3.4.23-4+b4", Source: "debian bookworm"},
		},
	}
	doc, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "image.json")
	if err := os.WriteFile(manifest, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return &rawArtifact{disk: disk, manifest: manifest}
}

func postProcess(t *testing.T, in packersdk.Artifact, cfg map[string]any) (string, *archive.Contents) {
	t.Helper()
	var p PostProcessor
	if err := p.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	out, _, _, err := p.PostProcess(context.Background(), packersdk.TestUi(t), in)
	if err != nil {
		t.Fatal(err)
	}
	path := out.Files()[0]
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	contents, err := archive.Validate(context.Background(), f)
	if err != nil {
		t.Fatalf("the OVA does not validate: %v", err)
	}
	return path, contents
}

func propertyMap(c *archive.Contents) map[string]string {
	m := map[string]string{}
	for _, p := range c.Descriptor.Properties {
		kind := "fixed"
		if p.UserConfigurable {
			kind = "user"
		}
		m[p.Key] = kind + ":" + p.Default
	}
	return m
}

func TestNodeOVAIsReproducibleAndRecordsVersions(t *testing.T) {
	in := artifact(t, RoleNode)
	dir := t.TempDir()
	a, contents := postProcess(t, in, map[string]any{"output": filepath.Join(dir, "a.ova"), "source_date_epoch": "1700000000"})
	b, _ := postProcess(t, in, map[string]any{"output": filepath.Join(dir, "b.ova"), "source_date_epoch": "1700000000"})
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two OVAs from the same disk and SOURCE_DATE_EPOCH differ")
	}
	if n := len(contents.Descriptor.Disks); n != 1 {
		t.Fatalf("a node OVA has %d disks, want 1", n)
	}
	props := propertyMap(contents)
	for key, want := range map[string]string{
		"harmony.image.role": "fixed:node", "harmony.image.version": "fixed:v0.1.0",
		"harmony.version.kubernetes": "fixed:v1.34.2", "harmony.version.etcd-server": "fixed:3.4.23-4+b4",
	} {
		if props[key] != want {
			t.Errorf("%s = %q, want %q", key, props[key], want)
		}
	}
	for key, v := range props {
		if strings.HasPrefix(v, "user:") {
			t.Errorf("a node OVA asks for %s; its properties are all fixed", key)
		}
	}
}

func TestApplianceOVAHasADataDiskAndAForm(t *testing.T) {
	_, contents := postProcess(t, artifact(t, RoleControlPlane), map[string]any{
		"output": filepath.Join(t.TempDir(), "cp.ova"), "source_date_epoch": "1700000000", "data_disk_gib": 1,
	})
	d := contents.Descriptor
	if len(d.Disks) != 2 || d.Disks[1].ID != "data" || d.Disks[1].Capacity != 1<<30 || d.Disks[1].PopulatedSize != 0 {
		t.Fatalf("disks %+v: want the system disk and an empty 1 GiB data disk", d.Disks)
	}
	if d.CPUs != 4 || d.MemoryMiB != 8192 {
		t.Errorf("appliance hardware %d CPUs %d MiB, want 4 and 8192", d.CPUs, d.MemoryMiB)
	}
	props := propertyMap(contents)
	for _, key := range []string{"harmony.hostname", "harmony.ip", "harmony.gateway", "harmony.dns", "harmony.ntp",
		"harmony.controller_vip", "harmony.admin_password_hash"} {
		if !strings.HasPrefix(props[key], "user:") {
			t.Errorf("%s = %q: want a user-configurable property", key, props[key])
		}
	}
}

func TestPostProcessorRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		cfg  map[string]any
		want string
	}{
		"no output":      {map[string]any{"source_date_epoch": "1"}, "output: required"},
		"not an ova":     {map[string]any{"output": "x.tar", "source_date_epoch": "1"}, `output "x.tar"`},
		"bad role":       {map[string]any{"output": "x.ova", "source_date_epoch": "1", "role": "worker"}, `role "worker"`},
		"bad hash":       {map[string]any{"output": "x.ova", "source_date_epoch": "1", "manifest_hash": "md5"}, "manifest_hash"},
		"no epoch":       {map[string]any{"output": "x.ova", "source_date_epoch": ""}, "source_date_epoch: required"},
		"old hardware":   {map[string]any{"output": "x.ova", "source_date_epoch": "1", "hardware_version": 7}, "hardware_version 7"},
		"huge data disk": {map[string]any{"output": "x.ova", "source_date_epoch": "1", "data_disk_gib": 9000}, "data_disk_gib 9000"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", "")
			var p PostProcessor
			err := p.Configure(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	// A role that disagrees with what image.json records.
	var p PostProcessor
	if err := p.Configure(map[string]any{"output": filepath.Join(dir, "x.ova"), "source_date_epoch": "1", "role": RoleControlPlane}); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := p.PostProcess(context.Background(), packersdk.TestUi(t), artifact(t, RoleNode))
	if err == nil || !strings.Contains(err.Error(), `says the image is a "node" image`) {
		t.Fatalf("err %v", err)
	}
}
