package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/integration/lab/body"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// vcenterPort is the simulator's port on the lab's .1.
const vcenterPort = 8989

// taskLatency is Config.VCenterLatency for each call that starts a task
// on a VM, as govmomi's simulator takes it.
func taskLatency(d time.Duration) map[string]int {
	if d <= 0 {
		return nil
	}
	delay := map[string]int{}
	for _, m := range []string{"CloneVM_Task", "PowerOnVM_Task", "PowerOffVM_Task", "ReconfigVM_Task", "Rename_Task", "Destroy_Task"} {
		delay[m] = int(d.Milliseconds())
	}
	return delay
}

// Serve is the lab's hypervisor: it runs the vCenter simulator on the
// lab's .1 and gives every powered-on VM a body, until ctx ends; then it
// stops the bodies. `harmonyctl lab serve` runs it, detached, for Up.
func Serve(ctx context.Context, stateDir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	r, err := loadRecord(abs)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("lab serve: no lab in %s (harmonyctl lab up makes one)", abs)
	}
	subnet, err := netip.ParsePrefix(r.Subnet)
	if err != nil {
		return fmt.Errorf("lab record: subnet: %w", err)
	}
	sim, err := vcsim.Start(vcsim.Options{Listen: netip.AddrPortFrom(addr(subnet, 1), vcenterPort).String(),
		MethodDelay: taskLatency(time.Duration(r.VCenterLatencyMS) * time.Millisecond)})
	if err != nil {
		return fmt.Errorf("lab serve: vCenter simulator: %w", err)
	}
	defer sim.Close()
	s, err := vsphere.Connect(ctx, sim.Provider(ProviderName, nil))
	if err != nil {
		return fmt.Errorf("lab serve: %w", err)
	}
	ms := &machines{vc: s.Client.Client, r: r, log: log, images: map[string]*body.Image{},
		rpcTool: filepath.Join(r.BinDir, "vmware-rpctool"), running: map[string]*machine{}}
	// The endpoint comes last: Up waits for it as the sign that vCenter
	// answers and the machines follow it.
	if err := sim.Endpoint.WriteFile(r.vcenterFile()); err != nil {
		return err
	}
	log.Info("lab serve: vCenter simulator", "url", sim.URL)
	return ms.run(ctx)
}

// readEndpoint reads how to reach the lab's vCenter.
func readEndpoint(r *record) (vcsim.Endpoint, error) { return vcsim.ReadEndpoint(r.vcenterFile()) }

// imageIndex is images.json: which OVA each image the controller imported
// came from, so that the machines boot a VM from its own image.
type imageIndex map[string]string

func (r *record) imageIndexFile() string { return filepath.Join(r.dir(), "images.json") }

func readImageIndex(r *record) (imageIndex, error) {
	data, err := os.ReadFile(r.imageIndexFile())
	if errors.Is(err, os.ErrNotExist) {
		return imageIndex{}, nil
	}
	if err != nil {
		return nil, err
	}
	idx := imageIndex{}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", r.imageIndexFile(), err)
	}
	return idx, nil
}

// addImage records an imported image's OVA.
func addImage(r *record, name, ova string) error {
	idx, err := readImageIndex(r)
	if err != nil {
		return err
	}
	idx[name] = ova
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(r.imageIndexFile(), append(data, '\n'), 0o600)
}
