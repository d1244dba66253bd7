// Package debootstrap is the harmony-debootstrap builder: it makes a
// bootable disk without a hypervisor. It debootstraps a Debian root file
// system (cached as a tarball), runs the build's provisioners in a chroot
// through the SDK's chroot communicator (so Packer's shell and file
// provisioners work as well as harmony-node), and writes a GPT disk with
// an EFI system partition and an ext4 root (packer/internal/disk).
package debootstrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/packer-plugin-sdk/multistep"
	"github.com/hashicorp/packer-plugin-sdk/multistep/commonsteps"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// BuilderID names the artifacts this builder makes.
const BuilderID = "harmonykaas.debootstrap"

// Builder implements packersdk.Builder.
type Builder struct {
	config Config
	runner multistep.Runner
}

var _ packersdk.Builder = (*Builder)(nil)

func (b *Builder) ConfigSpec() hcldec.ObjectSpec { return b.config.FlatMapstructure().HCL2Spec() }

func (b *Builder) Prepare(raws ...any) ([]string, []string, error) {
	if err := b.config.prepare(raws...); err != nil {
		return nil, nil, err
	}
	return nil, nil, nil
}

// Run builds the disk.
func (b *Builder) Run(ctx context.Context, ui packersdk.Ui, hook packersdk.Hook) (packersdk.Artifact, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("harmony-debootstrap: must run as root (debootstrap, chroot and mounts need it)")
	}
	c := &b.config
	if err := os.MkdirAll(c.OutputDir, 0o755); err != nil {
		return nil, fmt.Errorf("harmony-debootstrap: output_dir: %w", err)
	}
	root, err := filepath.Abs(filepath.Join(c.OutputDir, ".rootfs-"+c.ImageName))
	if err != nil {
		return nil, err
	}
	state := new(multistep.BasicStateBag)
	state.Put("config", c)
	state.Put("hook", hook)
	state.Put("ui", ui)
	state.Put("root", root)

	mounts := &chrootMounts{root: root}
	steps := []multistep.Step{
		&stepRootfs{},
		&stepMount{mounts: mounts},
		&stepProvision{},
		&stepWriteDisk{mounts: mounts},
	}
	b.runner = commonsteps.NewRunner(steps, c.PackerConfig, ui)
	b.runner.Run(ctx, state)

	if err, ok := state.GetOk("error"); ok {
		return nil, err.(error)
	}
	if _, ok := state.GetOk(multistep.StateCancelled); ok {
		return nil, errors.New("harmony-debootstrap: cancelled")
	}
	if _, ok := state.GetOk(multistep.StateHalted); ok {
		return nil, errors.New("harmony-debootstrap: halted")
	}
	art, ok := state.GetOk("artifact")
	if !ok {
		return nil, errors.New("harmony-debootstrap: no disk was written")
	}
	return art.(*Artifact), nil
}

// Artifact is the raw disk and the image.json copied out of it.
type Artifact struct {
	Disk      string
	ImageJSON string
}

func (a *Artifact) BuilderId() string { return BuilderID }

func (a *Artifact) Files() []string {
	files := []string{a.Disk}
	if a.ImageJSON != "" {
		files = append(files, a.ImageJSON)
	}
	return files
}

func (a *Artifact) Id() string     { return filepath.Base(a.Disk) }
func (a *Artifact) String() string { return "raw disk: " + a.Disk }

func (a *Artifact) State(name string) any {
	switch name {
	case "harmony.disk":
		return a.Disk
	case "harmony.image_json":
		return a.ImageJSON
	}
	return nil
}

func (a *Artifact) Destroy() error {
	var errs []error
	for _, f := range a.Files() {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// halt records err for Run and stops the steps.
func halt(state multistep.StateBag, err error) multistep.StepAction {
	state.Put("error", err)
	state.Get("ui").(packersdk.Ui).Error(err.Error())
	return multistep.ActionHalt
}
