// Package ova is the harmony-ova post-processor: it turns the raw disk a
// builder made into an OVA with the ova/ library. The control-plane
// appliance's OVA carries a second, empty data disk and the properties its
// deploy wizard asks for; node OVAs carry fixed properties that record
// every component version.
package ova

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2/hcldec"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/harmonykaas/harmony/images/components"
	"github.com/harmonykaas/harmony/ova"
	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// BuilderID names the artifacts this post-processor makes.
const BuilderID = "harmonykaas.ova"

// PostProcessor implements packersdk.PostProcessor.
type PostProcessor struct {
	config Config
}

var _ packersdk.PostProcessor = (*PostProcessor)(nil)

func (p *PostProcessor) ConfigSpec() hcldec.ObjectSpec { return p.config.FlatMapstructure().HCL2Spec() }

func (p *PostProcessor) Configure(raws ...any) error { return p.config.prepare(raws...) }

// PostProcess writes the OVA. The input (the raw disk) is not needed
// afterwards; Packer deletes it unless keep_input_artifact is set.
func (p *PostProcessor) PostProcess(ctx context.Context, ui packersdk.Ui, in packersdk.Artifact) (packersdk.Artifact, bool, bool, error) {
	c := p.config // a copy: role defaults must not leak into the next build
	raw, err := rawDisk(in)
	if err != nil {
		return nil, false, false, err
	}
	manifestPath := c.ImageJSON
	if manifestPath == "" {
		manifestPath = imageJSON(in)
	}
	if manifestPath == "" {
		return nil, false, false, errors.New("harmony-ova: no image.json: the artifact has none (did harmony-node run?) and image_json is not set")
	}
	image, err := components.LoadImageManifest(manifestPath)
	if err != nil {
		return nil, false, false, fmt.Errorf("harmony-ova: %w", err)
	}
	role := c.Role
	switch {
	case role == "":
		role = image.Role
	case image.Role != role:
		return nil, false, false, fmt.Errorf("harmony-ova: role %q, but %s says the image is a %q image", role, manifestPath, image.Role)
	}
	c.forRole(role)
	output, err := outputPath(c.Output)
	if err != nil {
		return nil, false, false, err
	}
	if err := os.MkdirAll(filepath.Dir(output), 0o755); err != nil {
		return nil, false, false, fmt.Errorf("harmony-ova: %w", err)
	}

	hash, _ := hashOf(c.ManifestHash) // checked in Configure
	mtime, _ := archive.SourceDateEpoch(c.SourceDateEpoch)
	disks := []ova.SourceDisk{{ID: "system", RawPath: raw}}
	if c.DataDiskGiB > 0 {
		disks = append(disks, ova.SourceDisk{ID: "data", Capacity: int64(c.DataDiskGiB) << 30})
	}
	ui.Say(fmt.Sprintf("harmony-ova: writing %s (%s image %s, %d disk(s))", output, role, image.Version, len(disks)))
	desc, err := ova.Assemble(ctx, ova.Options{
		Output:     output,
		Descriptor: descriptor(&c, role, image),
		Disks:      disks,
		Hash:       hash,
		ModTime:    mtime,
	})
	if err != nil {
		return nil, false, false, fmt.Errorf("harmony-ova: %w", err)
	}
	for _, d := range desc.Disks {
		ui.Message(fmt.Sprintf("%s: %s, capacity %d MiB, %d MiB populated, file %d MiB",
			d.ID, d.File, d.Capacity>>20, d.PopulatedSize>>20, d.FileSize>>20))
	}
	return &Artifact{Path: output, Role: role, Version: image.Version}, false, false, nil
}

// rawDisk finds the raw disk in the builder's artifact.
func rawDisk(in packersdk.Artifact) (string, error) {
	if p, ok := in.State("harmony.disk").(string); ok && p != "" {
		return p, nil
	}
	var raws []string
	for _, f := range in.Files() {
		if strings.HasSuffix(f, ".raw") || strings.HasSuffix(f, ".img") {
			raws = append(raws, f)
		}
	}
	if len(raws) != 1 {
		return "", fmt.Errorf("harmony-ova: the %s artifact has %d raw disk files (*.raw, *.img), want exactly one", in.BuilderId(), len(raws))
	}
	return raws[0], nil
}

// imageJSON finds the image.json the builder copied out of the image.
func imageJSON(in packersdk.Artifact) string {
	if p, ok := in.State("harmony.image_json").(string); ok && p != "" {
		return p
	}
	for _, f := range in.Files() {
		if filepath.Base(f) == "image.json" {
			return f
		}
	}
	return ""
}

// Artifact is the OVA.
type Artifact struct {
	Path    string
	Role    string
	Version string
}

func (a *Artifact) BuilderId() string { return BuilderID }
func (a *Artifact) Files() []string   { return []string{a.Path} }
func (a *Artifact) Id() string        { return filepath.Base(a.Path) }
func (a *Artifact) String() string {
	return fmt.Sprintf("Harmony %s OVA %s: %s", a.Role, a.Version, a.Path)
}
func (a *Artifact) State(name string) any {
	if name == "harmony.ova" {
		return a.Path
	}
	return nil
}
func (a *Artifact) Destroy() error { return os.Remove(a.Path) }

// descriptor is the OVF for the role, before the disks are known.
func descriptor(c *Config, role string, image *components.ImageManifest) ovf.Descriptor {
	product := map[string]string{RoleNode: "Harmony node", RoleControlPlane: "Harmony control-plane appliance"}[role]
	return ovf.Descriptor{
		Name:            c.VMName,
		Annotation:      fmt.Sprintf("%s %s. Built from the pinned components listed in its properties.", product, image.Version),
		HardwareVersion: c.HardwareVersion,
		CPUs:            c.CPUs,
		MemoryMiB:       c.MemoryMiB,
		OSType:          c.OSType,
		Network:         c.Network,
		Product:         ovf.Product{Product: product, Vendor: c.Vendor, Version: image.Version, FullVersion: image.Version},
		Properties:      properties(role, image),
	}
}
