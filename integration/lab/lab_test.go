package lab

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/vim25/types"
	"golang.org/x/sys/unix"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestConfigRefusesAddressesOutsideTheTestRange(t *testing.T) {
	base := Config{StateDir: t.TempDir(), BinDir: "/bin"}
	for name, tc := range map[string]struct {
		mut   func(*Config)
		field string
	}{
		"outside 198.18.0.0/15": {func(c *Config) { c.Subnet = netip.MustParsePrefix("10.0.0.0/24") }, "subnet"},
		"not a /24":             {func(c *Config) { c.Subnet = netip.MustParsePrefix("198.18.0.0/16") }, "subnet"},
		"not masked":            {func(c *Config) { c.Subnet = netip.MustParsePrefix("198.18.1.5/24") }, "subnet"},
		"IPv6":                  {func(c *Config) { c.Subnet = netip.MustParsePrefix("fd00::/120") }, "subnet"},
		"too many masters":      {func(c *Config) { c.Masters = v1.MaxMasters + 2 }, "masters"},
		"even masters":          {func(c *Config) { c.Masters = 2 }, "masters"},
		"too many workers":      {func(c *Config) { c.Workers = MaxWorkers + 1 }, "workers"},
		"negative workers":      {func(c *Config) { c.Workers = -1 }, "workers"},
		"no state dir":          {func(c *Config) { c.StateDir = "" }, "state dir"},
		"no bin dir":            {func(c *Config) { c.BinDir = "" }, "bin dir"},
	} {
		t.Run(name, func(t *testing.T) {
			c := base
			tc.mut(&c)
			err := c.defaults()
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("error %v, want one naming %q", err, tc.field)
			}
		})
	}
	c := base
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Masters != DefaultMasters || c.Subnet != DefaultSubnet || c.ImagesDir != "/out/images" {
		t.Fatalf("defaults: %d masters, subnet %s, images dir %s", c.Masters, c.Subnet, c.ImagesDir)
	}
}

// A directory that holds no lab record is not the lab's: Down leaves its
// files alone, whatever their names.
func TestDownWithoutRecordTouchesNoFiles(t *testing.T) {
	dir := t.TempDir()
	entries := slices.DeleteFunc(slices.Clone(labEntries), func(e string) bool { return e == recordName })
	for _, name := range entries {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("not the lab's"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Down(context.Background(), dir, nil); err != nil {
		t.Fatalf("down without a lab: %v", err)
	}
	for _, name := range entries {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s was removed: %v", name, err)
		}
	}
}

// A record naming namespaces of another lab is refused, not acted on.
func TestRecordOfAnotherDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	r := newRecord(filepath.Join(t.TempDir(), "elsewhere"))
	r.path = filepath.Join(dir, recordName)
	if err := r.save(); err != nil {
		t.Fatal(err)
	}
	if _, err := loadRecord(dir); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Fatalf("foreign record: %v", err)
	}
}

// The lab's pool hands out only its own subnet, and never the machine's
// .1, which the gateway is.
func TestIPPoolStaysInTheLabSubnet(t *testing.T) {
	p := ipPool(DefaultSubnet)
	if p.Network != DefaultSubnet.String() || p.Gateway != "198.18.100.1" {
		t.Fatalf("pool %+v", p)
	}
	for _, r := range p.Ranges {
		first, last, _ := strings.Cut(r, "-")
		for _, a := range []string{first, last} {
			ip := netip.MustParseAddr(a)
			if !DefaultSubnet.Contains(ip) || ip.As4()[3] <= 1 {
				t.Errorf("range %s: %s is not a VM address of %s", r, a, DefaultSubnet)
			}
		}
	}
	spec := clusterSpec(&Config{Masters: 3, Workers: 2, Subnet: DefaultSubnet}, "harmony-node-x")
	for _, c := range []string{spec.PodCIDR, spec.ServiceCIDR} {
		if !testRange.Overlaps(netip.MustParsePrefix(c)) || netip.MustParsePrefix(c).Bits() < testRange.Bits() {
			t.Errorf("cluster network %s is outside %s", c, testRange)
		}
		if netip.MustParsePrefix(c).Overlaps(DefaultSubnet) {
			t.Errorf("cluster network %s overlaps the lab subnet", c)
		}
	}
	if _, err := v1.DecodeClusterSpec(strings.NewReader(mustJSON(t, spec))); err != nil {
		t.Errorf("the lab's cluster spec is refused: %v", err)
	}
}

// A VM's link name fits the kernel's 15 bytes whatever the VM's name, and
// two names never share one.
func TestVMLinkNamesFit(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"lab-m1", "lab-m2", "a-cluster-with-a-long-name-w100"} {
		l := vmLink("abcdef", name)
		if len(l) > 15 {
			t.Errorf("%s: link %q is longer than 15 bytes", name, l)
		}
		if other, ok := seen[l]; ok {
			t.Errorf("%s and %s share link %s", name, other, l)
		}
		seen[l] = name
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Up can die after making a namespace and before recording it; Down finds
// the lab's namespaces by name anyway, and the record's files go with it.
func TestDownAfterAnInterruptedUp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lab")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r := newRecord(dir)
	r.CreatedDir = true
	if err := r.save(); err != nil {
		t.Fatal(err)
	}
	ns := vmNetns(r.ID, "m1")
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	// A process left running inside it, as an agent would be.
	sleeper := exec.Command("ip", "netns", "exec", ns, "sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill() })
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	// `ip netns exec` enters the namespace after it starts: Down finds the
	// process only once it is in (on a loaded machine that was too late,
	// and the sleep ran its 300 s out).
	deadline := time.Now().Add(30 * time.Second)
	for len(netnsPIDs(context.Background(), ns)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the process never entered the namespace")
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := Down(context.Background(), dir, nil); err != nil {
		t.Fatalf("down: %v", err)
	}
	if netnsExists(context.Background(), ns) {
		t.Errorf("namespace %s survived down", ns)
	}
	if err := <-done; err == nil {
		t.Error("the process in the namespace was not stopped")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state dir the lab made survived down: %v", err)
	}
	// Down again, with nothing left, is fine.
	if err := Down(context.Background(), dir, nil); err != nil {
		t.Fatalf("second down: %v", err)
	}
}

func TestSubnetAlreadyRoutedIsRefused(t *testing.T) {
	ctx := context.Background()
	ns := vmNetns(newRecord(t.TempDir()).ID, "routes")
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"},
		{"-n", ns, "addr", "add", "198.18.250.1/24", "dev", "d0"},
		{"-n", ns, "link", "set", "d0", "up"},
	} {
		if err := ip(ctx, args...); err != nil {
			t.Fatal(err)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		}
	}
	where := []string{"-n", ns}
	err := checkSubnetFree(ctx, where, netip.MustParsePrefix("198.18.250.0/24"))
	if err == nil || !strings.Contains(err.Error(), "198.18.250.0/24") || !strings.Contains(err.Error(), "d0") {
		t.Errorf("a routed subnet: %v, want an error naming it and its device", err)
	}
	if err := checkSubnetFree(ctx, where, netip.MustParsePrefix("198.18.251.0/24")); err != nil {
		t.Errorf("a free subnet: %v", err)
	}
}

// A power-on must not fail on the NIC of the body before it, which the
// kernel frees only when its namespace is freed, later, or never while
// another body's mount namespace holds it.
func TestReplugReplacesAStaleNIC(t *testing.T) {
	ctx := context.Background()
	r := newRecord(t.TempDir())
	r.Switch = vmNetns(r.ID, "sw")
	if err := ip(ctx, "netns", "add", r.Switch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", r.Switch).Run() })
	if err := ip(ctx, "-n", r.Switch, "link", "add", "br0", "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	ms := &machines{r: r}
	netns := vmNetns(r.ID, "m1")
	t.Cleanup(func() { exec.Command("ip", "netns", "del", netns).Run() })
	if err := ms.plugVM(ctx, "m1", netns); err != nil {
		t.Fatal(err)
	}
	// The old body's namespace lives on, unnamed, as if held elsewhere.
	holder := exec.Command("ip", "netns", "exec", netns, "sleep", "300")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	for deadline := time.Now().Add(30 * time.Second); len(netnsPIDs(ctx, netns)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the holder never entered the namespace")
		}
	}
	if err := ip(ctx, "netns", "del", netns); err != nil {
		t.Fatal(err)
	}
	if !linkExists(ctx, []string{"-n", r.Switch}, vmLink(r.ID, "m1")) {
		t.Fatal("the old NIC is gone already; the test proves nothing")
	}
	if err := ms.plugVM(ctx, "m1", netns); err != nil {
		t.Fatalf("plug again with the old NIC on the switch: %v", err)
	}
	if !linkExists(ctx, []string{"-n", netns}, "eth0") {
		t.Error("the new namespace has no eth0")
	}
}

// A VM's directory is its OS disk and follows the VM, not its name: the
// same VM powered on again keeps its writes; in an upgrade the old VM,
// renamed aside, keeps its disk under its new name while a new VM of the
// old name boots fresh; a rollback gives the old VM its own disk back;
// the disk of a destroyed VM goes.
func TestVMDirectoriesFollowTheirVMs(t *testing.T) {
	vms := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	vm := func(ref, name string) vmState {
		return vmState{Ref: types.ManagedObjectReference{Type: "VirtualMachine", Value: ref}, Name: name}
	}
	written := func(name string) string { return filepath.Join(vms, name, bodyDirName, "upper", "etc", "written") }
	own := func(v vmState, all ...vmState) {
		t.Helper()
		if err := ownDir(vms, v, all, log); err != nil {
			t.Fatalf("own %s as %s: %v", v.Ref.Value, v.Name, err)
		}
	}
	has := func(path string, want bool) {
		t.Helper()
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", path, err == nil, want)
		}
	}
	old := vm("vm-1", "c-m1")
	own(old, old)
	if err := os.MkdirAll(filepath.Dir(written("c-m1")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(written("c-m1"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	own(old, old)
	has(written("c-m1"), true)

	// The upgrade: the old VM is renamed aside, a new one takes the name.
	aside, replacement := vm("vm-1", "c-m1-old"), vm("vm-2", "c-m1")
	own(replacement, aside, replacement)
	has(written("c-m1"), false)
	has(written("c-m1-old"), true)

	// The rollback: the new VM goes, the old one gets its name back.
	own(old, old)
	has(written("c-m1"), true)
	has(filepath.Join(vms, "c-m1-old"), false)

	// The upgrade again, and this time the old VM is destroyed.
	own(replacement, aside, replacement)
	if err := sweepDirs(vms, []vmState{replacement}, log); err != nil {
		t.Fatal(err)
	}
	has(filepath.Join(vms, "c-m1-old"), false)
	has(filepath.Join(vms, "c-m1", vmOwnerFile), true)

	// A lab from before owners were recorded: the VM of the name keeps
	// its directory.
	legacy := filepath.Join(vms, "c-w1", bodyDirName)
	if err := os.MkdirAll(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	own(vm("vm-9", "c-w1"), vm("vm-9", "c-w1"))
	has(legacy, true)
	if err := ownDir(vms, vm("", "c-w2"), nil, log); err == nil {
		t.Error("a VM without a reference is given a directory")
	}
}

// A lab is refused on a disk whose free share is at the kubelets'
// eviction threshold, or would be after the lab's growth; it names the
// directory and how much to free.
func TestDiskCloseToEvictionIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	state := filepath.Join(dir, "state", "lab") // not made yet: its parent is measured
	if err := checkDiskRoom(state, 0); err != nil {
		t.Fatalf("an empty disk: %v", err)
	}
	if err := checkDiskRoom(state, 60<<20); err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "free") {
		t.Errorf("a disk without room for the lab's growth: %v", err)
	}
	// 88% full: below the kubelets' 15% even with nothing to grow.
	if err := os.WriteFile(filepath.Join(dir, "fill"), make([]byte, 56<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkDiskRoom(state, 0); err == nil || !strings.Contains(err.Error(), "evict") {
		t.Errorf("a disk at 88%%: %v", err)
	}
}

// One lab up or down at a time per state directory: while one holds it,
// Up and Down on it are refused before they touch anything, a lab in
// another directory is not held up, and a claim ends with its holder.
func TestOneLabCommandAtATimePerStateDir(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	release, err := claim(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Down(context.Background(), dir, nil); !errors.Is(err, ErrBusy) {
		t.Errorf("down while another holds the directory: %v", err)
	}
	_, err = Up(context.Background(), Config{StateDir: dir, BinDir: t.TempDir(), OVA: "/nonexistent.ova"})
	if !errors.Is(err, ErrBusy) {
		t.Errorf("up while another holds the directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kept")); err != nil {
		t.Errorf("a refused command touched the directory: %v", err)
	}
	if r, err := claim(other); err != nil {
		t.Errorf("another directory: %v", err)
	} else {
		r()
	}
	release()
	if err := Down(context.Background(), dir, nil); err != nil {
		t.Errorf("down once the claim ended: %v", err)
	}

	// A holder killed outright frees it too: a child process claims the
	// directory and is killed.
	cmd := exec.Command(os.Args[0], "-test.run=^TestClaimHelperProcess$")
	cmd.Env = append(os.Environ(), "HARMONY_LAB_CLAIM="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("claimed\n"))
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "claimed\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	if _, err := claim(dir); !errors.Is(err, ErrBusy) {
		t.Errorf("claim while the helper holds it: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if r, err := claim(dir); err != nil {
		t.Errorf("claim after its holder was killed: %v", err)
	} else {
		r()
	}
}

// TestClaimHelperProcess holds a claim until killed, for the test above.
func TestClaimHelperProcess(t *testing.T) {
	dir := os.Getenv("HARMONY_LAB_CLAIM")
	if dir == "" {
		t.Skip("run by TestOneLabCommandAtATimePerStateDir")
	}
	if _, err := claim(dir); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("claimed\n")
	time.Sleep(time.Hour)
}

// A Prometheus left on the lab's address (a lab not taken down) must not
// answer in place of the lab's own: the lab refuses to come up instead.
func TestAnotherPrometheusOnTheAddressIsRefused(t *testing.T) {
	ctx := context.Background()
	listen := freeLoopbackPort(t)
	start := func(name string) (procRecord, string, error) {
		r, conf, data := prometheusScratch(t, name)
		proc, err := launchPrometheus(ctx, r, conf, data, listen)
		return proc, conf, err
	}
	first, firstConf, err := start("first")
	if err != nil {
		t.Fatalf("the first Prometheus: %v", err)
	}
	t.Cleanup(func() { killAll(ctx, []int{first.PID}, 5*time.Second) })
	if got, err := prometheusConfigFile(ctx, listen); err != nil || got != firstConf {
		t.Fatalf("the first Prometheus's config.file = %q, %v; want %q", got, err, firstConf)
	}

	second, _, err := start("second")
	if err == nil {
		killAll(ctx, []int{second.PID}, 5*time.Second)
		t.Fatal("a second Prometheus on the same address was taken for the lab's own")
	}
	if !strings.Contains(err.Error(), "another Prometheus answers") && !strings.Contains(err.Error(), "prometheus exited") {
		t.Errorf("error %q names neither the other Prometheus nor the exit", err)
	}
	if second.Alive() {
		killAll(ctx, []int{second.PID}, 0)
		t.Error("the refused Prometheus was left running")
	}
}

// Prometheus is in the lab's record before the lab waits for it to
// answer: a `lab up` killed meanwhile leaves it for `lab down` to find.
// Here the wait is cut short at once, and the record must name it.
func TestPrometheusIsRecordedBeforeItAnswers(t *testing.T) {
	r, conf, data := prometheusScratch(t, "lab")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	proc, _ := launchPrometheus(ctx, r, conf, data, freeLoopbackPort(t))
	t.Cleanup(func() { killAll(context.Background(), []int{proc.PID}, 5*time.Second) })
	saved, err := loadRecord(r.dir())
	if err != nil || saved == nil {
		t.Fatalf("the lab's record after Prometheus started: %v, %v", saved, err)
	}
	if !slices.ContainsFunc(saved.Procs, func(p procRecord) bool { return p.Name == "prometheus" && p.PID == proc.PID && proc.PID > 0 }) {
		t.Fatalf("the lab's record %+v lacks the Prometheus it started (pid %d)", saved.Procs, proc.PID)
	}
}

// freeLoopbackPort is a loopback address no one listens on just now.
func freeLoopbackPort(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return netip.MustParseAddrPort(l.Addr().String())
}

// prometheusScratch is a lab record in a directory of its own, with a
// configuration that scrapes nothing and a data directory for Prometheus.
func prometheusScratch(t *testing.T, name string) (r *record, conf, data string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	r = newRecord(dir)
	if err := os.MkdirAll(r.logsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	conf = filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte("scrape_configs: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return r, conf, filepath.Join(dir, "data")
}
