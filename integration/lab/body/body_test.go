package body

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/procfs"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// labEnv is what a test that boots bodies needs, or a reason to skip.
type labEnv struct {
	ova string
}

// needLab skips the test unless it runs as root, HARMONY_IMAGES names a
// directory with a node OVA, and the tools are installed.
func needLab(t *testing.T) labEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: booting a body needs mounts, network namespaces and systemd-nspawn")
	}
	dir := os.Getenv("HARMONY_IMAGES")
	if dir == "" {
		t.Skip("HARMONY_IMAGES is not set: set it to the directory with harmony-node-*.ova (make images builds it into out/images)")
	}
	ova, err := FindOVA(dir, "harmony-node")
	if err != nil {
		t.Skipf("no node OVA: %v", err)
	}
	for _, tool := range []string{"systemd-nspawn", "nsenter", "ip", "mount", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (systemd-nspawn: apt-get install systemd-container)", tool)
		}
	}
	return labEnv{ova: ova}
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}

// testNet makes a network namespace with a veth to a bridge of its own,
// the host at 198.19.N.1 and the namespace at .2, and removes both when
// the test ends.
func testNet(t *testing.T) (netns, bodyIP string) {
	t.Helper()
	id := rand.IntN(90000) + 10000
	n := 200 + rand.IntN(50)
	netns = fmt.Sprintf("hbody-%d", id)
	bridge, veth := fmt.Sprintf("hbbr%d", id), fmt.Sprintf("hbv%d", id)
	run(t, "ip", "netns", "add", netns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", netns).Run() })
	run(t, "ip", "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "del", bridge).Run() })
	run(t, "ip", "addr", "add", fmt.Sprintf("198.19.%d.1/24", n), "dev", bridge)
	run(t, "ip", "link", "set", bridge, "up")
	run(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
	run(t, "ip", "link", "set", veth, "master", bridge, "up")
	bodyIP = fmt.Sprintf("198.19.%d.2", n)
	run(t, "ip", "-n", netns, "addr", "add", bodyIP+"/24", "dev", "eth0")
	run(t, "ip", "-n", netns, "link", "set", "eth0", "up")
	run(t, "ip", "-n", netns, "link", "set", "lo", "up")
	return netns, bodyIP
}

// shortTempDir is a temporary directory with a short path, for unix
// sockets.
func shortTempDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// pidNS names a process's PID namespace.
func pidNS(pid int) string {
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return ns
}

// checkGone asserts that nothing of a body remains: no process in its PID
// namespace, no nspawn, no mount of its state directory, no record.
func checkGone(t *testing.T, b *Body, ns, stateDir string) {
	t.Helper()
	if b.Nspawn.Alive() || b.Init.Alive() {
		t.Errorf("body processes still alive: nspawn %d %v, init %d %v", b.Nspawn.PID, b.Nspawn.Alive(), b.Init.PID, b.Init.Alive())
	}
	// A process killed after its parent died is reaped by the host's init,
	// in its own time: wait a little for zombies to go, and only log one
	// that stays (it runs nothing and holds nothing).
	for deadline := time.Now().Add(10 * time.Second); ; {
		var running, zombies []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil || ns == "" || pidNS(pid) != ns {
				continue
			}
			st, _ := procfs.ReadStat(pid)
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			desc := fmt.Sprintf("%d (%s, state %c)", pid, strings.TrimSpace(string(comm)), st.State)
			if st.State == 'Z' {
				zombies = append(zombies, desc)
			} else {
				running = append(running, desc)
			}
		}
		if len(running) > 0 {
			t.Errorf("processes still in the body's PID namespace: %v", running)
			break
		}
		if len(zombies) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("zombies of the body not yet reaped by the host's init: %v", zombies)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, stateDir) {
			t.Errorf("mount left: %s", line)
		}
	}
	if _, err := os.Stat(filepath.Join(stateDir, recordFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record left: %v", err)
	}
	if _, err := os.Lstat(propagateDir(b.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nspawn's propagation directory left: %v", err)
	}
	if stale, _ := filepath.Glob(filepath.Join(stateDir, ".#*")); len(stale) > 0 {
		t.Errorf("overlay work directories left: %v", stale)
	}
}

// isStatic reports whether an ELF file has no interpreter: a static
// binary.
func isStatic(t *testing.T, path string) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

func TestBody(t *testing.T) {
	env := needLab(t)
	testutil.Heavy(t)
	log := testLog(t)
	// Generous: in a CI run beside TestLab (before the two took turns),
	// one image conversion took 3m49s and a boot two minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	// Image: converted once, then a cache hit.
	cache := t.TempDir()
	start := time.Now()
	img, err := PrepareImage(ctx, env.ova, cache, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ReleaseImages(context.Background(), cache); err != nil {
			t.Errorf("ReleaseImages: %v", err)
		}
		if points, _ := MountsUnder(cache); len(points) > 0 {
			t.Errorf("mounts left under the cache: %v", points)
		}
	})
	t.Logf("first PrepareImage took %v", time.Since(start))
	start = time.Now()
	img2, err := PrepareImage(ctx, env.ova, cache, log)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("second PrepareImage took %v; want a cache hit", d)
	}
	if img2.Root != img.Root || img2.SHA256 != img.SHA256 {
		t.Errorf("second PrepareImage gave %+v, first %+v", img2, img)
	}
	if n, _ := MountsUnder(img.Root); len(n) != 1 {
		t.Errorf("image root mounted %d times, want once: %v", len(n), n)
	}
	if _, err := os.Stat(filepath.Join(img.Root, "usr/local/bin/harmony-agent")); err != nil {
		t.Fatalf("the image root has no agent: %v", err)
	}

	// The stand-in vmware-rpctool, static, and a guestinfo server.
	tool := filepath.Join(t.TempDir(), "vmware-rpctool")
	if err := BuildRPCTool(ctx, "../../..", tool); err != nil {
		t.Fatal(err)
	}
	if !isStatic(t, tool) {
		t.Fatal("the stand-in vmware-rpctool is not static")
	}
	// The body gets what the controller gives a VM: its static address in
	// guestinfo.harmony.network. Without it networkd waits for a DHCP
	// server that is not there, and boot waits with it.
	netns, bodyIP := testNet(t)
	name := fmt.Sprintf("hbody-%d", rand.IntN(100000))
	machineTunables := map[string]string{}
	for name := range kubeletTunables {
		v, err := os.ReadFile("/proc/sys/" + name)
		if err != nil {
			t.Fatal(err)
		}
		machineTunables[name] = string(v)
	}
	netcfg, err := (&v1.NetworkConfig{
		APIVersion: v1.APIVersion, Kind: "NetworkConfig",
		Address: bodyIP + "/24", Gateway: strings.TrimSuffix(bodyIP, ".2") + ".1", Hostname: name,
	}).EncodeGuestinfo()
	if err != nil {
		t.Fatal(err)
	}
	store := newMapStore("guestinfo.x", "from the lab", v1.NetworkGuestinfoKey, netcfg)
	giDir := shortTempDir(t, "hbgi")
	srv, err := ListenGuestinfo(filepath.Join(giDir, GuestinfoSocketName), store, log)
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, srvCancel := context.WithCancel(ctx)
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(srvCtx) }()
	t.Cleanup(func() { srvCancel(); <-srvDone })

	roDir, rwDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(roDir, "hello"), []byte("read me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	spec := Spec{
		Name:         name,
		ImageRoot:    img.Root,
		StateDir:     stateDir,
		Netns:        netns,
		GuestinfoDir: giDir,
		RPCTool:      tool,
		Binds: []Bind{
			{Host: roDir, Body: "/mnt/ro", ReadOnly: true},
			{Host: rwDir, Body: "/mnt/rw"},
		},
		Log: log,
	}
	// Whatever happens, nothing stays.
	t.Cleanup(func() {
		if err := Cleanup(context.Background(), stateDir, log); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
	})

	b, err := Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("nspawn %d, init %d", b.Nspawn.PID, b.Init.PID)
	if _, err := Start(ctx, spec); !errors.Is(err, ErrRunning) {
		t.Errorf("a second Start in the same state dir: %v, want ErrRunning", err)
	}
	bootCtx, bootCancel := context.WithTimeout(ctx, 6*time.Minute)
	state, err := b.WaitSettled(bootCtx, "harmony-agent.service")
	bootCancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot settled: systemd is %q", state)
	out := func(argv ...string) string {
		t.Helper()
		o, err := b.Output(ctx, argv...)
		if err != nil {
			t.Errorf("%v", err)
		}
		return strings.TrimSpace(string(o))
	}

	t.Run("pid1 is the image's systemd", func(t *testing.T) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", b.Init.PID))
		if strings.TrimSpace(string(comm)) != "systemd" {
			t.Errorf("init %d is %q", b.Init.PID, comm)
		}
		// The executable is the body's /usr/lib/systemd/systemd, which is
		// the image's file seen through the overlay (overlayfs keeps the
		// lower inode number) with no copy in the upper layer. Not the
		// host's systemd.
		var exe, root, want, host syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/exe", b.Init.PID), &exe); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/root/usr/lib/systemd/systemd", b.Init.PID), &root); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(filepath.Join(img.Root, "usr/lib/systemd/systemd"), &want); err != nil {
			t.Fatal(err)
		}
		if exe.Dev != root.Dev || exe.Ino != root.Ino || exe.Ino != want.Ino {
			t.Errorf("init's executable is dev %d inode %d; the body's systemd is dev %d inode %d, the image's inode %d", exe.Dev, exe.Ino, root.Dev, root.Ino, want.Ino)
		}
		if _, err := os.Lstat(filepath.Join(stateDir, upperDir, "usr/lib/systemd/systemd")); err == nil {
			t.Error("systemd was copied up into the body's upper layer")
		}
		if syscall.Stat("/usr/lib/systemd/systemd", &host) == nil && host.Dev == exe.Dev && host.Ino == exe.Ino {
			t.Error("init runs the host's systemd")
		}
		if got := out("cat", "/proc/1/comm"); got != "systemd" {
			t.Errorf("PID 1 in the body is %q", got)
		}
	})

	t.Run("machine", func(t *testing.T) {
		// The hostname is the one in guestinfo.harmony.network, set by
		// harmony-network.service as on a VM.
		if got := out("cat", "/proc/sys/kernel/hostname"); got != name {
			t.Errorf("hostname %q, want %q", got, name)
		}
		var nsfs syscall.Stat_t
		if err := syscall.Stat(netnsPath(netns), &nsfs); err != nil {
			t.Fatal(err)
		}
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", b.Init.PID))
		if want := fmt.Sprintf("net:[%d]", nsfs.Ino); link != want {
			t.Errorf("body's network namespace %s, want %s (%s)", link, want, netns)
		}
		if got := out("ip", "-4", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(got, bodyIP+"/24") {
			t.Errorf("eth0 in the body: %q, want %s", got, bodyIP)
		}
	})

	t.Run("what a VM's guest has", func(t *testing.T) {
		// Every cgroup controller writable, in the body's own cgroup: the
		// kubelet makes kubepods there.
		mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", b.Init.PID))
		if err != nil {
			t.Fatal(err)
		}
		controllers := 0
		for _, line := range strings.Split(string(mi), "\n") {
			m, err := procfs.ParseMountinfo(line)
			if err != nil || m.FSType != "cgroup" {
				continue
			}
			controllers++
			if !slices.Contains(strings.Split(m.Options, ","), "rw") {
				t.Errorf("cgroup %s is mounted %s in the body", m.Point, m.Options)
			}
		}
		if controllers == 0 {
			t.Error("no cgroup controller mounted in the body")
		}
		// Each tunable reads in the body as the kubelet wants it, and the
		// machine's own value is what it was before the body.
		for name, want := range kubeletTunables {
			if got := out("cat", "/proc/sys/"+name); got != want {
				t.Errorf("/proc/sys/%s = %q in the body, want %q", name, got, want)
			}
			if got, _ := os.ReadFile("/proc/sys/" + name); string(got) != machineTunables[name] {
				t.Errorf("the machine's /proc/sys/%s is %q, was %q before the body", name, got, machineTunables[name])
			}
		}
		if got := out("stat", "-c", "%F", "/dev/kmsg"); got != "regular empty file" && got != "regular file" {
			t.Errorf("/dev/kmsg in the body is a %s", got)
		}
	})

	t.Run("agent", func(t *testing.T) {
		o, _ := b.Output(ctx, "systemctl", "is-active", "harmony-agent.service")
		if got := strings.TrimSpace(string(o)); got != "active" && got != "activating" {
			t.Errorf("harmony-agent.service is %q", got)
		}
	})

	t.Run("binds", func(t *testing.T) {
		if got := out("cat", "/mnt/ro/hello"); got != "read me" {
			t.Errorf("read-only bind: %q", got)
		}
		if _, err := b.Output(ctx, "touch", "/mnt/ro/x"); err == nil {
			t.Error("wrote into a read-only bind")
		}
		out("sh", "-c", "echo written > /mnt/rw/out")
		if data, err := os.ReadFile(filepath.Join(rwDir, "out")); err != nil || string(data) != "written\n" {
			t.Errorf("read-write bind: %q, %v", data, err)
		}
	})

	t.Run("guestinfo", func(t *testing.T) {
		if got := out("vmware-rpctool", "info-get guestinfo.x"); got != "from the lab" {
			t.Errorf("info-get = %q", got)
		}
		out("vmware-rpctool", "info-set guestinfo.fromguest hello world")
		if v, ok := store.value("guestinfo.fromguest"); !ok || v != "hello world" {
			t.Errorf("after info-set the store has %q, %v", v, ok)
		}
		cmd, err := b.Command(ctx, "vmware-rpctool", "info-get guestinfo.unset")
		if err != nil {
			t.Fatal(err)
		}
		o, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.TrimSpace(string(o)) != "No value found" {
			t.Errorf("info-get of an unset key: %q, %v; want \"No value found\", exit 1", o, err)
		}
		// Under the agent's own hardening (systemd/harmony-agent.service).
		got := out("systemd-run", "--wait", "--pipe", "--quiet",
			"-p", "ProtectSystem=strict", "-p", "PrivateTmp=yes", "-p", "ProtectHome=yes",
			"-p", "NoNewPrivileges=yes", "-p", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
			"-p", "SystemCallFilter=@system-service", "-p", "SystemCallErrorNumber=EPERM",
			"-p", "RestrictNamespaces=yes", "-p", "ProtectControlGroups=yes",
			"-p", "CapabilityBoundingSet=CAP_NET_ADMIN CAP_DAC_OVERRIDE",
			"vmware-rpctool", "info-get guestinfo.x")
		if got != "from the lab" {
			t.Errorf("info-get under the agent's hardening = %q", got)
		}
		// The agent itself looks for its bootstrap document there.
		deadline := time.Now().Add(60 * time.Second)
		for !store.wasAsked("guestinfo.harmony.bootstrap") && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
		}
		if !store.wasAsked("guestinfo.harmony.bootstrap") {
			t.Error("the agent never asked for guestinfo.harmony.bootstrap")
		}
	})

	// Something written in the body lands in its upper layer, never in
	// the image.
	out("sh", "-c", "echo first boot > /var/tmp/harmony-body-marker")
	if _, err := os.Stat(filepath.Join(img.Root, "var/tmp/harmony-body-marker")); err == nil {
		t.Error("a write in the body reached the image")
	}
	if _, err := os.Stat(filepath.Join(stateDir, upperDir, "var/tmp/harmony-body-marker")); err != nil {
		t.Errorf("a write in the body is not in its upper layer: %v", err)
	}

	// Clean stop.
	ns := pidNS(b.Init.PID)
	start = time.Now()
	if err := b.Stop(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %v", time.Since(start))
	checkGone(t, b, ns, stateDir)
	if console, _ := os.ReadFile(b.Console()); !strings.Contains(string(console), "has been shut down") {
		t.Errorf("console has no clean shutdown: …%s", tail(console))
	}

	// Second boot from the same state dir keeps the upper layer; then the
	// process that started it "crashes": the handle is dropped, and
	// Cleanup has only the directory.
	b, err = Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := out("cat", "/var/tmp/harmony-body-marker"); got != "first boot" {
		t.Errorf("after a restart the body's disk has %q", got)
	}
	crashed := *b
	ns = pidNS(b.Init.PID)
	b = nil
	if err := Cleanup(ctx, stateDir, log); err != nil {
		t.Fatal(err)
	}
	checkGone(t, &crashed, ns, stateDir)
	if _, err := Open(stateDir, log); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open after Cleanup: %v", err)
	}

	// nspawn itself killed (the OOM killer, say): its body may run on
	// without it. Cleanup finds the body's PID 1 through the record.
	b, err = Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitSettled(ctx, "harmony-agent.service"); err != nil {
		t.Fatal(err)
	}
	crashed = *b
	ns = pidNS(b.Init.PID)
	if err := syscall.Kill(b.Nspawn.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); b.Nspawn.Alive() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("after SIGKILL to nspawn, the body's PID 1 is alive: %v", b.Init.Alive())
	b = nil
	if err := Cleanup(ctx, stateDir, log); err != nil {
		t.Fatal(err)
	}
	checkGone(t, &crashed, ns, stateDir)

	// The same, but a later process stops it cleanly: without nspawn,
	// Stop asks the body's systemd to power off.
	b, err = Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WaitSettled(ctx, "harmony-agent.service"); err != nil {
		t.Fatal(err)
	}
	ns = pidNS(b.Init.PID)
	if err := syscall.Kill(b.Nspawn.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); b.Nspawn.Alive() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	later, err := Open(stateDir, log)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := later.Stop(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Stop of an orphaned body took %v: it was killed, not powered off", d)
	}
	t.Logf("Stop of a body without nspawn took %v", time.Since(start))
	checkGone(t, later, ns, stateDir)

	// Releasing the image frees its mount and, unless another mount
	// namespace copied the mount meanwhile, its loop device.
	if err := img.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if points, _ := MountsUnder(img.Root); len(points) > 0 {
		t.Errorf("image still mounted: %v", points)
	}
	// The kernel frees an autoclear loop device after the last mount of
	// it goes, asynchronously.
	dev := loopFor(img.Raw)
	for deadline := time.Now().Add(15 * time.Second); dev != "" && time.Now().Before(deadline); dev = loopFor(img.Raw) {
		time.Sleep(100 * time.Millisecond)
	}
	if dev == "" {
		return
	}
	switch holders, others := foreignHolders(img.Root, dev), otherNspawns(); {
	case len(holders) > 0:
		t.Logf("not checking the loop device: mount namespaces of other processes hold a copy of the image mount: %v", holders)
	case len(others) > 0:
		// Their namespaces received the mount while it existed and may
		// keep it where no mountinfo shows it.
		t.Logf("not checking the loop device %s: other bodies run on this machine (nspawn %v)", dev, others)
	default:
		t.Errorf("loop device %s still backs %s", dev, img.Raw)
	}
}

// otherNspawns lists the PIDs of systemd-nspawn processes: this test's
// bodies have all stopped by the time it asks.
func otherNspawns() []string {
	var pids []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		data, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(string(data), "/usr/bin/systemd-nspawn\x00") {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

func tail(b []byte) string {
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(b)
}

// loopFor returns the loop device backed by file, if any.
func loopFor(file string) string {
	backs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range backs {
		data, err := os.ReadFile(f)
		if err == nil && strings.TrimSpace(string(data)) == file {
			return filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// foreignHolders lists processes of other mount namespaces that still
// hold the image mount, at dir or, copied, anywhere from the loop device
// dev: other sessions' namespaces copy the host's mounts when made, and a
// body's copy of the machine's mounts is outside its root (nspawn moves
// the body's root over "/" and chroots, so the rest stays), where the
// body's own mountinfo does not show it. Each namespace is read from
// inside, as nsenter sees it from its root.
func foreignHolders(dir, dev string) []string {
	devNum, _ := os.ReadFile(filepath.Join("/sys/block", dev, "dev"))
	num := strings.TrimSpace(string(devNum))
	self, _ := os.Readlink("/proc/self/ns/mnt")
	seen := map[string]bool{self: true}
	var holders []string
	links, _ := filepath.Glob("/proc/[0-9]*/ns/mnt")
	for _, l := range links {
		ns, err := os.Readlink(l)
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		pid := filepath.Base(filepath.Dir(filepath.Dir(l)))
		out, err := exec.Command("nsenter", "-t", pid, "-m", "cat", "/proc/self/mountinfo").Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			fields := strings.Fields(line)
			if len(fields) > 4 && (fields[4] == dir || (num != "" && fields[2] == num)) {
				holders = append(holders, pid+" ("+ns+")")
				break
			}
		}
	}
	return holders
}
