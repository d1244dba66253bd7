package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
)

// RunningVMs are the lab's VMs whose bodies run, by name.
func RunningVMs(stateDir string) ([]*VM, error) {
	r, err := openLab(stateDir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(r.vmsDir())
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var out []*VM
	for _, e := range entries {
		if !e.IsDir() || !vmName.MatchString(e.Name()) {
			continue
		}
		vm, err := r.vm(e.Name())
		if err != nil {
			return nil, err
		}
		if _, err := vm.Body(); err == nil {
			out = append(out, vm)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// LoadImage imports an OCI archive into the VM's containerd, in the
// namespace the kubelet uses, so that pods find the image without a
// registry: what `ctr images import` does on a real VM. Nothing can be
// pulled in the lab.
func (v *VM) LoadImage(ctx context.Context, archive string) error {
	b, err := v.Body()
	if err != nil {
		return err
	}
	src, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer src.Close()
	inBody := "/var/tmp/harmony-load-" + filepath.Base(archive)
	dst, err := os.OpenFile(b.Path(inBody), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("VM %s: %w", v.Name, err)
	}
	defer os.Remove(b.Path(inBody))
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return fmt.Errorf("VM %s: copy %s: %w", v.Name, archive, err)
	}
	if err := dst.Close(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := b.Output(ctx, "ctr", "--namespace", "k8s.io", "images", "import", "--no-unpack", inBody); err != nil {
		return fmt.Errorf("VM %s: import %s: %w", v.Name, filepath.Base(archive), err)
	}
	return nil
}

// ImportImage imports another node OVA into the lab: into its vCenter
// through the controller, as `harmonyctl image import` does against a
// real one, and into the lab's index of OVAs, so that the VMs cloned from
// it boot it. An upgrade then moves the lab's cluster to it.
func ImportImage(ctx context.Context, stateDir, ova string, log *slog.Logger) (*v1.Image, error) {
	r, err := openLab(stateDir)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(ova)
	if err != nil {
		return nil, err
	}
	conf, err := clientconfig.Load(filepath.Join(r.controllerDir(), "admin.conf"))
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	ctl, err := client.New(conf, "")
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	img, err := importImage(ctx, abs, log, ctl)
	if err != nil {
		return nil, err
	}
	if err := addImage(r, img.Name, abs); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	return img, nil
}
