package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/images/components"
	"github.com/harmonykaas/harmony/integration/imageboot"
)

// nodeImage is the newest node OVA in $HARMONY_IMAGES (`make images`).
func nodeImage(t *testing.T) string {
	t.Helper()
	return newestImage(t, "harmony-node-*.ova")
}

// newestImage is the newest OVA in $HARMONY_IMAGES whose name matches
// pattern.
func newestImage(t *testing.T, pattern string) string {
	t.Helper()
	dir := os.Getenv("HARMONY_IMAGES")
	if dir == "" {
		t.Skip("HARMONY_IMAGES is not set: `make test` builds the images and sets it")
	}
	found, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(found) == 0 {
		t.Fatalf("no %s in %s: run make images", pattern, dir)
	}
	sort.Slice(found, func(i, j int) bool {
		a, _ := os.Stat(found[i])
		b, _ := os.Stat(found[j])
		return a.ModTime().After(b.ModTime())
	})
	return found[0]
}

// ovaDisk writes the OVA's first disk to path as a raw disk and returns
// the offset of its root file system.
func ovaDisk(ctx context.Context, t *testing.T, ova, path string) int64 {
	t.Helper()
	if err := imageboot.RawFromOVA(ctx, ova, 0, path); err != nil {
		t.Fatal(err)
	}
	root, err := imageboot.RootOffset(path)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestImageBoot boots the node image's disk, taken back out of the OVA,
// under QEMU with TCG and OVMF, with a bootstrap document for a controller
// on this host, and waits for systemd to report harmony-agent active on
// the serial console (the agent sends READY once it has enrolled and made
// its first node-stack pass) and for the controller to see the node
// enrolled and reporting.
func TestImageBoot(t *testing.T) {
	ova := nodeImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := t.TempDir()

	disk := filepath.Join(dir, "node.raw")
	root := ovaDisk(ctx, t, ova, disk)

	// As built, the kubelet on PATH is n's, through the link the agent
	// repoints: sysprep once emptied the link's directory, so only a
	// node given a role ever had a kubelet.
	pins, err := components.Load("../images/components.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for link, want := range map[string]string{
		"/usr/bin/kubelet":     components.KubeletLink,
		components.KubeletLink: components.KubernetesBinary(pins.Kubernetes[0].Version, "kubelet"),
	} {
		if got, err := imageboot.ReadLink(ctx, disk, root, link); err != nil || got != want {
			t.Errorf("in the image, %s -> %q (%v), want %s", link, got, err, want)
		}
	}

	// A blank data disk, as the controller attaches to a master.
	data := filepath.Join(dir, "data.raw")
	if err := os.WriteFile(data, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(data, 1<<30); err != nil {
		t.Fatal(err)
	}
	pristine := filepath.Join(dir, "pristine.raw")
	if err := imageboot.CopySparse(disk, pristine); err != nil {
		t.Fatal(err)
	}
	opts := imageboot.Options{Disk: disk, DataDisk: data, SerialLog: filepath.Join(dir, "serial.log"), Net: netip.MustParsePrefix("198.18.120.0/24")}
	port := freePort(t)
	ctl := startController(t, func(c *controller.Config) {
		c.Listen = fmt.Sprintf("127.0.0.1:%d", port)
		c.AdvertiseURLs = []string{fmt.Sprintf("https://%s:%d", opts.HostAddr(), port)}
		c.ExtraSANs = []string{opts.HostAddr().String()}
	})
	boot := ctl.addNode(t, v1.NodeSpec{Name: "node-boot", Role: v1.RoleWorker, IPs: []string{opts.GuestAddr().String()}})
	doc, err := json.Marshal(boot)
	if err != nil {
		t.Fatal(err)
	}
	if err := imageboot.InjectFile(ctx, disk, root, "/etc/harmony/bootstrap.json", doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := imageboot.InjectAgentReporter(ctx, disk, root); err != nil {
		t.Fatal(err)
	}

	vm, early, err := imageboot.Boot(ctx, opts, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Stop() })
	t.Logf("%-22s %5.1f s after QEMU started", "kernel", early.Kernel.Seconds())
	t.Logf("%-22s %5.1f s after QEMU started", "systemd", early.Systemd.Seconds())
	dump := func() {
		vm.Stop()
		t.Logf("serial console (tail):\n%s", vm.SerialTail(6000))
		if out, err := imageboot.Debugfs(context.Background(), disk, root, "ls -l /var/log/journal\n"); err == nil {
			t.Logf("journal directory:\n%s", out)
		}
		t.Logf("controller log:\n%s", ctl.logs.String())
	}

	marks := []struct {
		what string
		re   *regexp.Regexp
	}{
		{"harmony-agent settled", imageboot.AgentReport},
		{"boot report done", imageboot.KubeletUnitReport},
	}
	for _, m := range marks {
		at, err := vm.WaitSerial(ctx, m.re)
		if err != nil {
			dump()
			t.Fatalf("%s: %v", m.what, err)
		}
		t.Logf("%-22s %5.1f s after QEMU started", m.what, at.Sub(vm.Started()).Seconds())
	}

	serial := vm.Serial()
	for _, u := range imageboot.UnitTimes(serial) {
		t.Logf("unit %-38s started %6.1f s, active %6.1f s after the kernel started", u.Unit, u.Started, u.Active)
	}
	if state := imageboot.AgentReport.FindStringSubmatch(serial)[1]; state != "active" {
		dump()
		t.Fatalf("systemd says harmony-agent is %q, want active", state)
	}
	// A node's runtime is ready for kubeadm: containerd runs and holds
	// every container image the image pins (imported at first boot), and
	// the kubelet is Kubernetes n. Under TCG the test stops there; the lab
	// boots the same image as VM bodies whose kubelets join (TestLab).
	if m := imageboot.ContainerdReport.FindStringSubmatch(serial); m == nil || m[1] != "active" {
		t.Errorf("containerd: %q", m)
	}
	// The packages' own etcd, keepalived and HAProxy would fight the
	// agent's units; ipvsadm's script and e2scrub only cost boot time.
	if m := imageboot.PackagedUnitsReport.FindStringSubmatch(serial); m == nil {
		t.Error("no report of the packaged units")
	} else {
		for _, u := range strings.Fields(imageboot.PackagedUnits) {
			if !strings.Contains(" "+m[1]+" ", " "+u+"=masked ") {
				t.Errorf("%s is not masked: %s", u, m[1])
			}
		}
	}
	m := imageboot.ImagesReport.FindStringSubmatch(serial)
	if m == nil {
		t.Fatal("no report of containerd's images")
	}
	held := strings.Fields(m[1])
	for _, img := range pins.Images {
		if !slices.Contains(held, img.Ref) {
			t.Errorf("containerd lacks %s; it holds %q", img.Ref, held)
		}
	}
	if m := imageboot.KubeletReport.FindStringSubmatch(serial); m == nil || m[1] != pins.Kubernetes[0].Version {
		t.Errorf("kubelet version %q, want %s", m, pins.Kubernetes[0].Version)
	}
	// The image's systemd runs the kubelet with kubeadm's flags, and the
	// kubelet waits, restarting, for the configuration kubeadm writes.
	if m := imageboot.KubeletUnitReport.FindStringSubmatch(serial); m == nil || (m[1] != "active" && m[1] != "activating") || m[2] == "0" {
		t.Errorf("kubelet unit: %q, want it active or activating, having run without /var/lib/kubelet/config.yaml", m)
	}

	if m := imageboot.DataDiskReport.FindStringSubmatch(serial); m == nil || strings.Join(strings.Fields(m[1]), " ") != "ext4 harmony-data" {
		t.Errorf("data disk at /var/lib/etcd: %q, want the blank disk formatted as ext4 harmony-data", m)
	}

	// The controller's side: the node enrolled and reports status.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n := ctl.node(t, "node-boot")
		if !n.EnrolledAt.IsZero() && n.Status != nil {
			t.Logf("enrolled; status phase %q", n.Status.Phase)
			break
		}
		if time.Now().After(deadline) {
			dump()
			t.Fatalf("the controller does not see node-boot enrolled and reporting: %+v", n)
		}
		time.Sleep(time.Second)
	}
	vm.Stop()
	checkReimageKeepsDataDisk(ctx, t, ctl, pristine, data, opts)
}

// checkReimageKeepsDataDisk boots a fresh copy of the image's disk with
// the first boot's data disk, as an upgrade by reimage does: the data disk
// is found by its label and mounted as it is, not formatted again. The
// first boot went through the firmware and systemd-boot on virtio; this
// one has vSphere's pvscsi and vmxnet3.
func checkReimageKeepsDataDisk(ctx context.Context, t *testing.T, ctl *ctl, pristine, data string, opts imageboot.Options) {
	t.Helper()
	uuid := func() string {
		out, err := exec.CommandContext(ctx, "blkid", "-p", "-o", "value", "-s", "UUID", data).Output()
		if err != nil {
			t.Fatalf("blkid %s: %v", data, err)
		}
		return strings.TrimSpace(string(out))
	}
	before := uuid()
	disk := filepath.Join(filepath.Dir(opts.Disk), "reimaged.raw")
	if err := imageboot.CopySparse(pristine, disk); err != nil {
		t.Fatal(err)
	}
	root, err := imageboot.RootOffset(disk)
	if err != nil {
		t.Fatal(err)
	}
	var fresh v1.NodeWithBootstrap
	if err := ctl.admin.Do(ctx, "POST", client.NodePath("node-boot", "/token"), v1.TokenRequest{}, &fresh); err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(fresh.Bootstrap)
	if err := imageboot.InjectFile(ctx, disk, root, "/etc/harmony/bootstrap.json", doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := imageboot.InjectAgentReporter(ctx, disk, root); err != nil {
		t.Fatal(err)
	}
	// This boot has the devices the OVF declares, as vSphere gives them:
	// both disks behind pvscsi, a vmxnet3 NIC. The initrd carries only the
	// drivers images/*.pkr.hcl list (initrd_modules), so the root is found
	// only if pvscsi's is among them, and the agent enrolls through the
	// vmxnet3 interface.
	opts.Disk, opts.SerialLog = disk, filepath.Join(filepath.Dir(opts.SerialLog), "serial-reimaged.log")
	opts.VMware = true
	vm, _, err := imageboot.Boot(ctx, opts, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()
	if _, err := vm.WaitSerial(ctx, imageboot.KubeletUnitReport); err != nil {
		t.Fatalf("the reimaged node's boot report, on pvscsi and vmxnet3: %v\n%s", err, vm.SerialTail(6000))
	}
	serial := vm.Serial()
	for what, re := range map[string]*regexp.Regexp{
		"the root disk on pvscsi":  regexp.MustCompile(`sd 0:0:0:0: \[sd[a-z]\] Attached SCSI disk`),
		"the root mounted from it": regexp.MustCompile(`EXT4-fs \(sd[a-z]2\): mounted`),
		"the vmxnet3 NIC":          regexp.MustCompile(`vmxnet3 \S+ \S+: NIC Link is Up`),
	} {
		if !re.MatchString(serial) {
			t.Errorf("the reimaged node's console lacks %s (%s)", what, re)
		}
	}
	if state := imageboot.AgentReport.FindStringSubmatch(serial); state == nil || state[1] != "active" {
		t.Errorf("the reimaged node's agent: %q, want active", state)
	}
	if m := imageboot.DataDiskReport.FindStringSubmatch(serial); m == nil || strings.Join(strings.Fields(m[1]), " ") != "ext4 harmony-data" {
		t.Errorf("data disk after the reimage: %q, want ext4 harmony-data", m)
	}
	vm.Stop()
	if after := uuid(); after != before || before == "" {
		t.Errorf("the data disk's file system was %q and is %q: formatted again", before, after)
	}
}
