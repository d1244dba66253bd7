package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/vim25/types"

	"github.com/harmonykaas/harmony/controller/controllertest"
	"github.com/harmonykaas/harmony/controller/vsphere"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// The appliance commands end to end on vcsim: the provider document with
// the password from the environment, the check of the controller before
// anything changes, the upgrade, the wait for the controller (here a real
// controller on this machine stands for the one in the appliance, which
// vcsim's VMs do not run), and the rollback.
func TestApplianceUpgradeAndRollbackCommands(t *testing.T) {
	ctx := context.Background()
	sim, err := vcsim.Start(vcsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	p := sim.Provider("appliance", nil)
	p.VCenter.Password = ""
	providerFile := filepath.Join(t.TempDir(), "provider.json")
	data, _ := json.Marshal(p)
	if err := os.WriteFile(providerFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(passwordEnv, sim.Password)
	p.VCenter.Password = sim.Password
	s, err := vsphere.Connect(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ovas := map[string]string{}
	for _, v := range []string{"1.0.0", "1.1.0"} {
		ovas[v] = filepath.Join(dir, v+".ova")
		if _, err := vcsim.ApplianceOVA(ctx, ovas[v], v); err != nil {
			t.Fatal(err)
		}
	}
	imported, err := vsphere.ImportOVA(ctx, s.Client.Client, vsphere.ImportOptions{
		OVA: ovas["1.0.0"], Datastore: "LocalDS_0", ResourcePool: "DC0_C0/Resources", Folder: s.FolderPath(), Name: "harmony",
		Networks: map[string]string{"nic0": "VM Network"}, Properties: map[string]string{"harmony.hostname": "harmony-cp-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PowerOn(ctx, imported.VM); err != nil {
		t.Fatal(err)
	}
	vms := func() map[string]vsphere.VMInfo {
		t.Helper()
		folder, err := s.ClusterFolder(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.VMs(ctx, folder)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]vsphere.VMInfo{}
		for _, vm := range list {
			out[vm.Name] = vm
		}
		return out
	}
	tc := controllertest.Start(t)
	g := &globals{config: tc.AdminConfig, server: tc.URL()}

	// A client config that reaches another controller (another CA):
	// refused before vCenter is touched.
	other := controllertest.Start(t)
	wrong := &globals{config: tc.AdminConfig, server: other.URL()}
	out, err := runCommand(t, applianceUpgradeCommand(wrong), "harmony", "--provider", providerFile, "--ova", ovas["1.1.0"])
	if err == nil || !strings.Contains(err.Error(), "does not answer this client config before the upgrade") {
		t.Fatalf("upgrade with a config for another controller: %v\n%s", err, out)
	}
	if got := vms(); len(got) != 1 || got["harmony"].Power != string(types.VirtualMachinePowerStatePoweredOn) {
		t.Fatalf("a refused upgrade changed vCenter: %+v", got)
	}

	out, err = runCommand(t, applianceUpgradeCommand(g), "harmony", "--provider", providerFile, "--ova", ovas["1.1.0"], "--wait", "1m")
	if err != nil {
		t.Fatalf("upgrade: %v\n%s", err, out)
	}
	for _, want := range []string{"upgraded from 1.0.0 to 1.1.0", "[LocalDS_0] harmony-appliance/harmony.vmdk", "harmony-previous", "answers with the same CA and store"} {
		if !strings.Contains(out, want) {
			t.Errorf("upgrade's output lacks %q:\n%s", want, out)
		}
	}
	got := vms()
	if got["harmony"].Tags[vsphere.TagReplaces] == "" || got["harmony-previous"].Power != string(types.VirtualMachinePowerStatePoweredOff) {
		t.Errorf("after the upgrade: %+v", got)
	}

	out, err = runCommand(t, applianceRollbackCommand(g), "harmony", "--provider", providerFile, "--wait", "1m")
	if err != nil {
		t.Fatalf("rollback: %v\n%s", err, out)
	}
	if !strings.Contains(out, "rolled back to 1.0.0") || !strings.Contains(out, "harmony-1.1.0-rolled-back is powered off") {
		t.Errorf("rollback's output:\n%s", out)
	}
	got = vms()
	if got["harmony"].Ref != imported.VM || got["harmony"].Power != string(types.VirtualMachinePowerStatePoweredOn) || len(got) != 2 {
		t.Errorf("after the rollback: %+v", got)
	}
}

// The wait ends when the controller answers again, and at once when a
// controller of another CA answers in its place.
func TestWaitForController(t *testing.T) {
	ctx := context.Background()
	tc := controllertest.Start(t)
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		tc.Restart(t, 2*time.Second)
	}()
	time.Sleep(200 * time.Millisecond) // down now
	var out bytes.Buffer
	if err := waitForController(ctx, &out, tc.Admin, time.Minute, 100*time.Millisecond); err != nil {
		t.Fatalf("wait across a restart: %v", err)
	}
	<-restarted
	if !strings.Contains(out.String(), "answers with the same CA and store") {
		t.Errorf("output: %q", out.String())
	}

	other := controllertest.Start(t)
	g := &globals{config: tc.AdminConfig, server: other.URL()}
	c, err := g.client()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = waitForController(ctx, &out, c, time.Minute, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "another CA") {
		t.Fatalf("wait for a controller of another CA: %v", err)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("the wait for a controller of another CA took %s: it should end at once", time.Since(start))
	}
}
