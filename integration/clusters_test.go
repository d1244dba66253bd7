package integration

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"sigs.k8s.io/yaml"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// TestClusterSurvivesControllerKill drives harmony-controller and harmonyctl
// as processes against vcsim: provider, image import and a 3+2 create
// whose controller is killed (SIGKILL) after the first clones. After a
// restart the create finishes with exactly five VMs, each powered on.
func TestClusterSurvivesControllerKill(t *testing.T) {
	bin := binaries(t)
	sim, err := vcsim.Start(vcsim.Options{MethodDelay: map[string]int{"CloneVM_Task": 300}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "controller")
	port := strconv.Itoa(freePort(t))
	serve := func() *testutil.Proc {
		p := testutil.StartProc(t, filepath.Join(bin, "harmony-controller"), nil, "serve", "--data-dir", data,
			"--listen", "127.0.0.1:"+port, "--clone-parallelism", "1", "--retry-base", "100ms")
		eventually(t, "controller listens", func() bool {
			c, err := net.Dial("tcp", "127.0.0.1:"+port)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
		return p
	}
	ctlProc := serve()
	ctl := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, "harmonyctl"), append([]string{"--config", filepath.Join(data, "admin.conf")}, args...)...)
		cmd.Env = append(os.Environ(), "HARMONY_VCENTER_PASSWORD="+sim.Password)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustCtl := func(args ...string) string {
		t.Helper()
		out, err := ctl(args...)
		if err != nil {
			t.Fatalf("harmonyctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	provider := sim.Provider("lab", &v1.IPPool{Network: "198.18.20.0/24", Ranges: []string{"198.18.20.10-198.18.20.40"}, Gateway: "198.18.20.1"})
	provider.VCenter.Password = "" // from the environment, not the file
	writeYAML(t, filepath.Join(dir, "provider.yaml"), provider)
	out := mustCtl("provider", "apply", "-f", filepath.Join(dir, "provider.yaml"))
	if strings.Contains(out, sim.Password) {
		t.Fatalf("provider apply printed the password:\n%s", out)
	}
	ovaPath := smallNodeOVA(t, dir)
	mustCtl("image", "import", ovaPath, "--provider", "lab")
	if out := mustCtl("image", "import", ovaPath, "--provider", "lab"); !strings.Contains(out, "already imported") {
		t.Fatalf("second import: %s", out)
	}
	masters := 3
	writeYAML(t, filepath.Join(dir, "cluster.yaml"), v1.ClusterSpec{APIVersion: v1.APIVersion, Kind: "Cluster", Name: "kill",
		Provider: "lab", Image: "harmony-node-2-0-0", Masters: &masters, Workers: 2, VIP: "198.18.20.10",
		PodCIDR: "198.19.0.0/17", ServiceCIDR: "198.19.128.0/20", WorkerSize: &v1.NodeSize{CPUs: 1, MemoryMiB: 2048}})
	out = mustCtl("cluster", "create", "-f", filepath.Join(dir, "cluster.yaml"), "-o", "json")
	var op v1.Operation
	if err := json.Unmarshal([]byte(out), &op); err != nil {
		t.Fatalf("create answer: %v\n%s", err, out)
	}

	u, _ := url.Parse(sim.URL)
	u.User = url.UserPassword(sim.Username, sim.Password)
	vc, err := govmomi.NewClient(context.Background(), u, true)
	if err != nil {
		t.Fatal(err)
	}
	vmNames := func() []string {
		list, err := find.NewFinder(vc.Client).VirtualMachineList(context.Background(), "/DC0/vm/harmony/kill/*")
		if err != nil {
			return nil
		}
		var names []string
		for _, vm := range list {
			names = append(names, vm.Name())
		}
		return names
	}
	eventually(t, "two VMs cloned before the kill", func() bool { return len(vmNames()) >= 2 })
	if err := ctlProc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ctlProc.Done
	if n := len(vmNames()); n >= 5 {
		t.Fatalf("the create had finished (%d VMs) before the kill; slow the clones down", n)
	}
	serve()
	out = mustCtl("operation", "get", op.ID, "--watch", "--timeout", "3m")
	if !strings.Contains(out, "succeeded") {
		t.Fatalf("operation after restart:\n%s", out)
	}
	if names := vmNames(); len(names) != 5 {
		t.Fatalf("%d VMs after the restart, want exactly 5: %v", len(names), names)
	}
	out = mustCtl("cluster", "get", "kill", "-o", "json")
	var cl v1.Cluster
	if err := json.Unmarshal([]byte(out), &cl); err != nil {
		t.Fatalf("cluster get: %v\n%s", err, out)
	}
	if len(cl.Status.Nodes) != 5 {
		t.Fatalf("cluster get shows %d nodes", len(cl.Status.Nodes))
	}
	for _, n := range cl.Status.Nodes {
		if n.Step != "PoweredOn" || n.Power != "poweredOn" {
			t.Errorf("%s: step %s, power %s", n.Name, n.Step, n.Power)
		}
	}
	// A refused request exits 2.
	if _, err := ctl("cluster", "scale", "kill", "--masters", "2"); exitCode(err) != 2 {
		t.Errorf("scaling to an even master count: exit %d, want 2", exitCode(err))
	}
	mustCtl("cluster", "delete", "kill", "--wait")
	if names := vmNames(); len(names) != 0 {
		t.Fatalf("after delete: %v", names)
	}
	// The masters' data disks stay, listed with the cluster's UID, until
	// an admin purges them.
	out = mustCtl("cluster", "leftovers", "list", "-o", "json")
	var left v1.ClusterLeftoversList
	if err := json.Unmarshal([]byte(out), &left); err != nil {
		t.Fatalf("leftovers list: %v\n%s", err, out)
	}
	if len(left.Items) != 1 || left.Items[0].Cluster != "kill" || len(left.Items[0].DataDiskFolders) == 0 {
		t.Fatalf("leftovers after delete: %s", out)
	}
	id := left.Items[0].ID
	if out := mustCtl("cluster", "leftovers", "list"); !strings.Contains(out, id) || !strings.Contains(out, left.Items[0].DataDiskFolders[0]) {
		t.Errorf("leftovers table lacks %s or its folder:\n%s", id, out)
	}
	if out := mustCtl("cluster", "leftovers", "purge", id); !strings.Contains(out, "purged") {
		t.Errorf("purge said: %s", out)
	}
	if _, err := ctl("cluster", "leftovers", "purge", id); exitCode(err) != 2 {
		t.Errorf("purging again: exit %d, want 2 (not found)", exitCode(err))
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func smallNodeOVA(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "node.ova")
	if err := vcsim.NodeOVA(context.Background(), out, "2.0.0"); err != nil {
		t.Fatal(err)
	}
	return out
}
