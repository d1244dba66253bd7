package node

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/images/components"
)

// TestUnitsFor checks the units each image installs and enables: both
// carry the agent and harmony-network.service (the static address from
// guestinfo, before systemd-networkd), and every unit named exists in the
// repository's systemd/ directory, which the build reads them from.
func TestUnitsFor(t *testing.T) {
	repoUnits := filepath.Join("..", "..", "..", "systemd")
	for role, want := range map[string][]string{
		RoleNode:         {"harmony-agent.service", "harmony-network.service", "harmony-data-disk.service", "kubelet.service", "harmony-images-import.service"},
		RoleControlPlane: {"harmony-agent.service", "harmony-network.service", "harmony-data-disk.service", "harmony-controller.service", "harmony-controller-backup.timer"},
	} {
		got := unitsFor(role)
		if !slices.Equal(got, want) {
			t.Errorf("%s: units %v, want %v", role, got, want)
		}
		for _, u := range got {
			data, err := os.ReadFile(filepath.Join(repoUnits, u))
			if err != nil {
				t.Errorf("%s: %v", role, err)
				continue
			}
			// systemctl enable needs an [Install] section.
			if !strings.Contains(string(data), "\n[Install]\nWantedBy=") {
				t.Errorf("%s: %s has no [Install] WantedBy=", role, u)
			}
		}
	}

	// A timer's service is installed with it, and not enabled: the timer
	// starts it.
	p := testPlan(t, RoleControlPlane)
	installed := false
	for _, f := range p.Files {
		installed = installed || f.Dest == "/etc/systemd/system/harmony-controller-backup.service"
	}
	if !installed || slices.Contains(p.Enable, "harmony-controller-backup.service") {
		t.Errorf("the control plane's backup service: installed %v, enabled %v; want installed only", installed, slices.Contains(p.Enable, "harmony-controller-backup.service"))
	}

	// Each image's drop-ins, from the repository, and only its own: the
	// appliance's data disk holds the controller's state, a node's
	// kubelet runs as kubeadm wants.
	for role, want := range map[string]string{
		RoleControlPlane: "/etc/systemd/system/harmony-data-disk.service.d/appliance.conf",
		RoleNode:         "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
	} {
		var dropIns []string
		for _, f := range testPlan(t, role).Files {
			if strings.HasSuffix(f.Dest, ".conf") && strings.Contains(f.Dest, ".service.d/") {
				dropIns = append(dropIns, f.Dest)
			}
		}
		if !slices.Equal(dropIns, []string{want}) {
			t.Errorf("%s: drop-ins %v, want %s", role, dropIns, want)
		}
	}
	for _, d := range append(dropInsFor(RoleControlPlane), dropInsFor(RoleNode)...) {
		if _, err := os.Stat(filepath.Join(repoUnits, d)); err != nil {
			t.Error(err)
		}
	}

	// harmony-network.service must run before networkd reads its files.
	data, err := os.ReadFile(filepath.Join(repoUnits, "harmony-network.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"DefaultDependencies=no",
		"Before=systemd-networkd.service network-pre.target",
		"Wants=network-pre.target",
		"ExecStart=/usr/local/bin/harmony-agent network apply",
		"TimeoutStartSec=",
	} {
		if !strings.Contains(string(data), "\n"+line) {
			t.Errorf("harmony-network.service lacks %q", line)
		}
	}
}

const testPinsFile = "../../../images/components.yaml"

// testBinaries are the names of each Kubernetes version in testPlan's
// bundle, links to its one multi-call binary "kube".
var testBinaries = []string{"kubeadm", "kubelet", "kubectl", "kube-proxy"}

func testPins(t *testing.T) *components.Pins {
	t.Helper()
	pins, err := components.Load(testPinsFile)
	if err != nil {
		t.Fatal(err)
	}
	return pins
}

// testPlan is role's plan for a bundle of every pinned component, each
// Kubernetes version a multi-call binary and the control plane's images
// of one version sharing one archive.
func testPlan(t *testing.T, role string) *plan {
	t.Helper()
	pins := testPins(t)
	dir := t.TempDir()
	write := func(rel string, mode os.FileMode) {
		t.Helper()
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(rel), mode); err != nil {
			t.Fatal(err)
		}
	}
	var bundle components.Bundle
	for _, k := range pins.Kubernetes {
		write(filepath.Join("kubernetes", k.Version, "kube"), 0o755)
		for _, n := range testBinaries {
			if err := os.Symlink("kube", filepath.Join(dir, "kubernetes", k.Version, n)); err != nil {
				t.Fatal(err)
			}
		}
		bundle.Kubernetes = append(bundle.Kubernetes, components.BundleKubernetes{Version: k.Version, Binaries: testBinaries, Multicall: "kube", Source: "module"})
	}
	for i, img := range pins.Images {
		// The control plane's images by version share one archive.
		file := fmt.Sprintf("image-%d.tar", i)
		if _, version, _ := strings.Cut(img.Ref, ":"); strings.Contains(img.Ref, "/kube-") {
			file = "kubernetes-control-plane-" + version + ".tar"
		}
		write(filepath.Join("images", file), 0o644)
		bundle.Images = append(bundle.Images, components.BundleImage{Ref: img.Ref, Digest: "sha256:" + strings.Repeat("0", 64), File: file})
	}
	for _, b := range pins.Binaries {
		write(filepath.Join("binaries", b.Name), 0o755)
		bundle.Binaries = append(bundle.Binaries, components.BundleBinary{Name: b.Name, Version: b.Version, Source: "module"})
	}
	doc, err := json.Marshal(bundle)
	if err != nil {
		t.Fatal(err)
	}
	write("bundle.json", 0o644)
	if err := os.WriteFile(filepath.Join(dir, "bundle.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}

	p, err := newPlan(&Config{Role: role, ComponentsFile: testPinsFile, BundleDir: dir, AgentBinary: "/bin/true",
		ControllerBinary: "/bin/true", UnitsDir: filepath.Join("..", "..", "..", "systemd"), StagingDir: "/tmp/s"})
	if err != nil {
		t.Fatalf("%s: %v", role, err)
	}
	return p
}

// A bundle whose versions are multi-call binaries and whose control-plane
// images share archives: the node image gets each version's binary once,
// every name a link to it, and each archive once; the appliance gets the
// binary of n with kubectl alone.
func TestPlanInstallsAMulticallVersionOnce(t *testing.T) {
	pins, names := testPins(t), testBinaries
	for _, role := range []string{RoleNode, RoleControlPlane} {
		p := testPlan(t, role)
		dests := map[string]int{}
		for _, f := range p.Files {
			dests[f.Dest]++
			if strings.HasSuffix(f.Dest, ".tar") && dests[f.Dest] > 1 {
				t.Errorf("%s: %s installed twice", role, f.Dest)
			}
		}
		links := map[string]string{}
		for _, l := range p.Links {
			links[l.Path] = l.Target
		}
		versions := pins.Kubernetes
		want := names
		if role == RoleControlPlane {
			versions, want = versions[:1], []string{"kubectl"}
		}
		for _, k := range versions {
			kube := components.KubernetesBinary(k.Version, "kube")
			if dests[kube] != 1 {
				t.Errorf("%s: %s installed %d times, want once", role, kube, dests[kube])
			}
			for _, n := range want {
				bin := components.KubernetesBinary(k.Version, n)
				if dests[bin] != 0 || links[bin] != "kube" {
					t.Errorf("%s: %s installed %d times and linked to %q, want a link to kube", role, bin, dests[bin], links[bin])
				}
			}
		}
		if role == RoleNode {
			n := pins.Kubernetes[0].Version
			if dests[path.Join(imagesDir, "kubernetes-control-plane-"+n+".tar")] != 1 {
				t.Errorf("node: the control plane archive of %s is not installed once: %v", n, dests)
			}
		} else if links[components.KubernetesBinary(pins.Kubernetes[0].Version, "kubelet")] != "" {
			t.Error("the appliance got a kubelet")
		}
	}
}

// The node image keeps only the CNI plugins a node runs and drops
// what it never uses, files and directories; a kept plugin the package
// did not install fails the build.
func TestPruneKeepsWhatANodeRuns(t *testing.T) {
	dir := t.TempDir()
	cni := filepath.Join(dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bridge", "host-local", "portmap", "loopback", "macvlan", "dhcp", "vlan"} {
		if err := os.WriteFile(filepath.Join(cni, name), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shim := filepath.Join(dir, "containerd-shim-runc-v1")
	if err := os.WriteFile(shim, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	library := filepath.Join(dir, "perl")
	if err := os.MkdirAll(filepath.Join(library, "5.36"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &plan{CNIPlugins: components.CNIPlugins(), CNIBinDir: cni, Remove: []string{shim, library}}
	run := func() (string, error) {
		var script strings.Builder
		if err := installScript.ExecuteTemplate(&script, "prune", p); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-eu", "-c", script.String()).CombinedOutput()
		return string(out), err
	}
	if out, err := run(); err != nil {
		t.Fatalf("prune: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(cni)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"bridge", "host-local", "loopback", "portmap"}; !slices.Equal(left, want) {
		t.Errorf("CNI plugins left %v, want %v", left, want)
	}
	if _, err := os.Stat(shim); !os.IsNotExist(err) {
		t.Errorf("the v1 shim is still there: %v", err)
	}
	if _, err := os.Stat(library); !os.IsNotExist(err) {
		t.Errorf("the directory to remove is still there: %v", err)
	}
	if err := os.Remove(filepath.Join(cni, "portmap")); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "portmap is missing") {
		t.Errorf("with portmap missing: %v\n%s", err, out)
	}
}

// Each image masks systemd's generators that have nothing to find on it,
// by names systemd really has (a misspelt mask masks nothing; the build
// machine's systemd is the images' Debian release's), and keeps those a
// boot needs: the fstab generator mounts the ESP, the getty generator
// starts the serial console's login.
func TestPlanMasksUnneededGenerators(t *testing.T) {
	for _, role := range []string{RoleNode, RoleControlPlane} {
		links := map[string]string{}
		for _, l := range testPlan(t, role).Links {
			links[l.Path] = l.Target
		}
		for _, g := range maskedGenerators {
			if links[path.Join(generatorDir, g)] != "/dev/null" {
				t.Errorf("%s: %s is not masked", role, g)
			}
		}
	}
	for _, g := range maskedGenerators {
		if _, err := os.Stat(path.Join("/usr/lib/systemd/system-generators", g)); err != nil {
			t.Errorf("masked generator %s is not one of systemd's: %v", g, err)
		}
	}
	for _, keep := range []string{"systemd-fstab-generator", "systemd-getty-generator", "systemd-debug-generator"} {
		if slices.Contains(maskedGenerators, keep) {
			t.Errorf("%s is masked; a boot needs it", keep)
		}
	}
}
