//go:build linux

package service

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/agent/netinfo"
	"github.com/harmonykaas/harmony/agent/sdnotify"
	"github.com/harmonykaas/harmony/images/components"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// These tests run the manager against a real systemd (Debian's 252),
// booted by the test as PID 1 of its own PID, mount, UTS and IPC
// namespaces, in a cgroup of its own under the host's cgroup2 hierarchy,
// with a private /run and /etc/systemd/system. Its unit path is that
// /etc/systemd/system plus a directory of empty stand-in targets
// (multi-user.target, sysinit.target, ...), so it starts nothing of the
// host's. A test skips only when that systemd cannot boot here, and says
// why.

const systemdBinary = "/lib/systemd/systemd"

// testSystemd is a booted systemd.
type testSystemd struct {
	pid    int    // host PID
	root   string // /proc/<pid>/root: its view of the file system
	base   string // a directory at the same path in both views
	cgroup string // host path of its cgroup
	socket string // its private D-Bus socket, from the host
	log    *testutil.LogBuffer
}

var stubTargets = []string{"harmony-test.target", "multi-user.target", "sysinit.target", "basic.target",
	"shutdown.target", "network-online.target", "network.target", "local-fs.target", "sockets.target"}

// bootSystemd boots a systemd for one test and tears it down after.
func bootSystemd(t *testing.T) *testSystemd { return bootSystemdWith(t, false) }

// bootSystemdWith boots a systemd; with overlay, its /etc and /var are
// copy-on-write views of the host's, so that units may write there
// without touching the host (files the test writes into sd.base after
// boot are then not seen by systemd).
func bootSystemdWith(t *testing.T, overlay bool) *testSystemd {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		t.Skipf("systemd cannot boot here, so the manager is not tested against it: "+format, args...)
	}
	if os.Geteuid() != 0 {
		skip("not root")
	}
	for _, bin := range []string{systemdBinary, "/usr/bin/unshare"} {
		if _, err := os.Stat(bin); err != nil {
			skip("%v", err)
		}
	}
	cg2, own, err := cgroup2()
	if err != nil {
		skip("%v", err)
	}
	suffix := randomSuffix()
	cgroup := filepath.Join(cg2, own, "harmony-systemd-test-"+suffix)
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		skip("no cgroup of its own: %v", err)
	}
	// Not t.TempDir: the units run with PrivateTmp, and see their own
	// /tmp. /var/lib is the same in every view.
	base, err := os.MkdirTemp("/var/lib", "harmony-systemd-test-")
	if err != nil {
		os.Remove(cgroup)
		t.Fatal(err)
	}
	sd := &testSystemd{base: base, cgroup: cgroup}
	// Runs last: after systemd and its units are gone.
	t.Cleanup(func() {
		sd.removeCgroups(t)
		os.RemoveAll(base)
	})
	stubs := filepath.Join(base, "stubs")
	mustMkdir(t, stubs, filepath.Join(base, "bin"), filepath.Join(base, "out"))
	for _, target := range stubTargets {
		writeFile(t, filepath.Join(stubs, target), "[Unit]\nDescription=test stand-in for "+target+"\n", 0o644)
	}
	// systemd logs only to a terminal: a pseudo-terminal stands in for
	// its console, and the test keeps what it writes.
	stderr := &testutil.LogBuffer{}
	console, closeConsole, err := pseudoTerminal(stderr)
	if err != nil {
		skip("no pseudo-terminal for its console: %v", err)
	}
	t.Cleanup(closeConsole)

	// Every mount is private to the new mount namespace. /dev/console is
	// the pseudo-terminal, so that the host's console is left alone.
	// /proc/sys is read-only but for the network's, which is its own
	// (systemd raises fs.file-max and the like at boot).
	script := `set -e
mount --make-rprivate /
mount --bind "$HARMONY_CONSOLE" /dev/console
mount -t tmpfs -o mode=0755 tmpfs /run
if [ -n "$HARMONY_OVERLAY" ]; then
	for d in etc var; do
		mkdir -p /run/harmony-overlay/$d/upper /run/harmony-overlay/$d/work
		mount -t overlay overlay -o lowerdir=/$d,upperdir=/run/harmony-overlay/$d/upper,workdir=/run/harmony-overlay/$d/work /$d
	done
fi
mount -t tmpfs -o mode=0755 tmpfs /etc/systemd/system
mount -t proc proc /proc
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount --bind /proc/sys/net /proc/sys/net
mount -o remount,bind,rw /proc/sys/net
umount -R /sys/fs/cgroup 2>/dev/null || true
mount -t cgroup2 cgroup2 /sys/fs/cgroup
exec ` + systemdBinary + ` --system --unit=harmony-test.target --log-target=console --log-level=debug
`
	cgfd, err := syscall.Open(cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
	if err != nil {
		skip("open cgroup: %v", err)
	}
	// unshare --cgroup (no fork) roots the cgroup namespace at the new
	// cgroup, then the shell execs systemd: PID 1 all along.
	cmd := exec.Command("/usr/bin/unshare", "--cgroup", "/bin/sh", "-c", script)
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"container=harmony-test",
		"SYSTEMD_UNIT_PATH=/etc/systemd/system:" + stubs,
		"HARMONY_CONSOLE=" + console,
	}
	if overlay {
		cmd.Env = append(cmd.Env, "HARMONY_OVERLAY=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
		UseCgroupFD: true,
		CgroupFD:    cgfd,
		Pdeathsig:   syscall.SIGKILL,
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	// Pdeathsig fires when the thread that forked exits, not the process,
	// and Go ends a thread that a goroutine left locked (inNetns does):
	// systemd is started from a thread held until it exits.
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(exited)
	}()
	err = <-started
	syscall.Close(cgfd)
	if err != nil {
		skip("start: %v", err)
	}
	sd.pid, sd.log = cmd.Process.Pid, stderr
	sd.root = fmt.Sprintf("/proc/%d/root", sd.pid)
	sd.socket = filepath.Join(sd.root, "run/systemd/private")
	t.Cleanup(func() {
		sd.kill(t)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("systemd (pid %d) did not exit", sd.pid)
		}
	})

	// Wait for it to answer on its private socket and finish booting.
	deadline := time.Now().Add(60 * time.Second)
	for {
		state, err := sd.systemState()
		if err == nil && (state == "running" || state == "degraded") {
			break
		}
		select {
		case <-exited:
			skip("systemd exited: %s\n%s", cmd.ProcessState, stderr)
		default:
		}
		if time.Now().After(deadline) {
			skip("no answer on %s within a minute (state %q, %v)\n%s", sd.socket, state, err, stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return sd
}

func (sd *testSystemd) systemState() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := os.Stat(sd.socket); err != nil {
		return "", err
	}
	m := &Systemd{cfg: SystemdConfig{Socket: sd.socket, Dial: sd.dial}}
	defer m.Close()
	return m.systemState(ctx)
}

// dial connects to systemd's private socket. systemd ignores messages
// from a process outside its PID namespace (the kernel gives their sender
// PID as 0 there), so a helper process inside that namespace, this test
// binary run by nsenter, relays the connection over a socket pair.
func (sd *testSystemd) dial(ctx context.Context) (net.Conn, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "relay-parent"), os.NewFile(uintptr(pair[1]), "relay-child")
	defer ours.Close()
	defer theirs.Close()
	// Not CommandContext: the relay lives as long as the connection.
	cmd := exec.Command("nsenter", "--target", strconv.Itoa(sd.pid), "--pid", "--",
		os.Args[0], "-test.run=^TestHelperRelaySystemd$", "-test.count=1")
	cmd.Env = append(os.Environ(), relayHelperEnv+"="+sd.socket)
	cmd.ExtraFiles = []*os.File{theirs}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go cmd.Wait()
	return net.FileConn(ours)
}

const relayHelperEnv = "HARMONY_TEST_RELAY_SYSTEMD"

// TestHelperRelaySystemd is the relay, not a test: it connects to the
// socket named in its environment and copies bytes both ways between it
// and fd 3 until either side closes.
func TestHelperRelaySystemd(t *testing.T) {
	path := os.Getenv(relayHelperEnv)
	if path == "" {
		t.Skip("run by the tests as a helper process")
	}
	sd, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := net.FileConn(os.NewFile(3, "parent"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(sd, parent); done <- struct{}{} }()
	go func() { io.Copy(parent, sd); done <- struct{}{} }()
	<-done
}

// kill ends systemd and everything it started at once.
func (sd *testSystemd) kill(t *testing.T) {
	if err := os.WriteFile(filepath.Join(sd.cgroup, "cgroup.kill"), []byte("1"), 0); err != nil {
		t.Logf("cgroup.kill: %v; killing systemd alone", err)
		syscall.Kill(sd.pid, syscall.SIGKILL)
	}
}

// removeCgroups removes the test's cgroup and those systemd made in it,
// deepest first, once their processes are gone.
func (sd *testSystemd) removeCgroups(t *testing.T) {
	testutil.Eventually(t, 30*time.Second, "the test cgroups to empty and go", func() bool {
		var dirs []string
		filepath.WalkDir(sd.cgroup, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			os.Remove(d)
		}
		_, err := os.Stat(sd.cgroup)
		return errors.Is(err, os.ErrNotExist)
	})
}

// manager connects a Systemd manager to the test's systemd.
func (sd *testSystemd) manager(t *testing.T) *Systemd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := NewSystemd(ctx, SystemdConfig{
		Socket:      sd.socket,
		Dial:        sd.dial,
		UnitDir:     filepath.Join(sd.root, "etc/systemd/system"),
		EnvDir:      filepath.Join(sd.base, "env"),
		RestartSec:  200 * time.Millisecond,
		StopTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// script writes an executable shell script where units can run it.
func (sd *testSystemd) script(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(sd.base, "bin", name)
	writeFile(t, p, "#!/bin/sh\n"+body, 0o755)
	return p
}

func (sd *testSystemd) out(name string) string { return filepath.Join(sd.base, "out", name) }

// cgroup2 finds the host's cgroup2 mount and this process's cgroup in it.
func cgroup2() (mount, own string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if fields := strings.Fields(pre); ok && len(fields) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			mount = fields[4]
			break
		}
	}
	if mount == "" {
		return "", "", errors.New("no cgroup2 file system is mounted")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return mount, rest, nil
		}
	}
	return "", "", errors.New("this process is in no cgroup2 group")
}

func randomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func mustMkdir(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustEnsure(t *testing.T, m *Systemd, u Unit) bool {
	t.Helper()
	changed, err := m.Ensure(ctx30(t), u)
	if err != nil {
		t.Fatalf("ensure %s: %v", u.Name, err)
	}
	return changed
}

func mustState(t *testing.T, m *Systemd, name string) State {
	t.Helper()
	st, err := m.State(ctx30(t), name)
	if err != nil {
		t.Fatalf("state %s: %v", name, err)
	}
	return st
}

func TestSystemdBoots(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	if m.Kind() != "systemd" {
		t.Fatal(m.Kind())
	}
	if _, err := m.State(ctx30(t), "nothing-here"); !errors.Is(err, ErrUnknownUnit) {
		t.Fatalf("state of an unknown unit: %v", err)
	}
}

func sleeperUnit(name string, args ...string) Unit {
	return Unit{Name: name, Command: append([]string{"/bin/sleep", "1000"}, args...)}
}

func TestSystemdEnsureStartsEnablesAndIsIdempotent(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	before := time.Now()
	if !mustEnsure(t, m, sleeperUnit("sleeper")) {
		t.Fatal("first Ensure reported no change")
	}
	st := mustState(t, m, "sleeper")
	if !st.Running || st.PID <= 1 || st.Started.Before(before.Add(-time.Second)) || st.Restarts != 0 || st.LastExit != "" {
		t.Fatalf("state after start: %+v", st)
	}
	unitFile := filepath.Join(sd.root, "etc/systemd/system", UnitName("sleeper"))
	info, err := os.Stat(unitFile)
	if err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("unit file: %v %v", info, err)
	}
	// Enabled: the wants link exists in its /etc/systemd/system.
	link, err := os.Readlink(filepath.Join(sd.root, "etc/systemd/system/multi-user.target.wants", UnitName("sleeper")))
	if err != nil || !strings.HasSuffix(link, UnitName("sleeper")) {
		t.Fatalf("not enabled: %q %v", link, err)
	}

	// The same definition again: nothing changes, nothing restarts, and
	// the unit file is not rewritten.
	mtime := info.ModTime()
	if mustEnsure(t, m, sleeperUnit("sleeper")) {
		t.Fatal("second Ensure of the same unit reported a change")
	}
	again := mustState(t, m, "sleeper")
	if again.PID != st.PID || !again.Started.Equal(st.Started) {
		t.Fatalf("the same definition restarted the unit: %+v then %+v", st, again)
	}
	if info, _ := os.Stat(unitFile); !info.ModTime().Equal(mtime) {
		t.Fatal("the unit file was rewritten")
	}

	// A changed definition restarts it.
	if !mustEnsure(t, m, sleeperUnit("sleeper", "2000")) {
		t.Fatal("a changed definition reported no change")
	}
	changed := mustState(t, m, "sleeper")
	if !changed.Running || changed.PID == st.PID {
		t.Fatalf("a changed definition did not restart the unit: %+v then %+v", st, changed)
	}

	// A fresh manager (an agent restart) sees the unit as it is.
	m2 := sd.manager(t)
	if mustEnsure(t, m2, sleeperUnit("sleeper", "2000")) {
		t.Fatal("a new manager restarted a unit with the same definition")
	}
	if st := mustState(t, m2, "sleeper"); st.PID != changed.PID {
		t.Fatalf("pid %d after the manager restart, want %d", st.PID, changed.PID)
	}
}

func TestSystemdRestartsAfterACrashAndCounts(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	mustEnsure(t, m, sleeperUnit("crashy"))
	first := mustState(t, m, "crashy")
	// Kill the main process as a crash would.
	sd.killMain(t, m, "crashy", syscall.SIGKILL)
	var st State
	testutil.Eventually(t, 30*time.Second, "systemd to restart the killed unit", func() bool {
		st = mustState(t, m, "crashy")
		return st.Running && st.PID != first.PID
	})
	// systemd forgets the exit once the next process runs.
	if st.Restarts != 1 {
		t.Fatalf("after one crash: %+v", st)
	}

	// A daemon that cannot start is retried for ever, and its exits seen.
	mustEnsure(t, m, Unit{Name: "failing", Command: []string{"/bin/sh", "-c", "exit 3"}})
	testutil.Eventually(t, 30*time.Second, "restarts of a failing unit, and its exit seen between them", func() bool {
		st = mustState(t, m, "failing")
		// Beyond systemd's default start limit of 5 restarts.
		return st.Restarts >= 6 && !st.Running && st.LastExit == "exit status 3"
	}, func() { t.Logf("last state %+v", st) })
	// Ensure leaves a unit between restarts to systemd.
	if _, err := m.Ensure(ctx30(t), Unit{Name: "failing", Command: []string{"/bin/sh", "-c", "exit 3"}}); err != nil {
		t.Fatalf("ensure of a failing unit: %v", err)
	}
}

// killMain signals a unit's main process through systemd, as a crash or
// an operator would.
func (sd *testSystemd) killMain(t *testing.T, m *Systemd, name string, sig syscall.Signal) {
	t.Helper()
	c, err := m.bus(ctx30(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KillUnitWithTarget(ctx30(t), UnitName(name), sdbus.Main, int32(sig)); err != nil {
		t.Fatal(err)
	}
}

func TestSystemdReloadAndRestart(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	hups := sd.out("hups")
	// The script says when its trap is set: a SIGHUP before that ends
	// the shell (CI once sent it that early), which is no reload.
	loop := sd.script(t, "hup-loop.sh", `trap 'echo hup >> "$1"' HUP
: > "$1.trapped"
while :; do sleep 0.1; done
`)
	u := Unit{Name: "reloader", Command: []string{loop, hups}, ReloadSignal: syscall.SIGHUP}
	mustEnsure(t, m, u)
	st := mustState(t, m, "reloader")
	testutil.Eventually(t, 30*time.Second, "the unit to trap SIGHUP", func() bool {
		_, err := os.Stat(hups + ".trapped")
		return err == nil
	})
	if err := m.Reload(ctx30(t), "reloader"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the unit to receive SIGHUP", func() bool {
		b, _ := os.ReadFile(hups)
		return string(b) == "hup\n"
	})
	if after := mustState(t, m, "reloader"); after.PID != st.PID || !after.Running {
		t.Fatalf("a signal reload restarted the unit: %+v then %+v", st, after)
	}

	// Without a reload signal, a reload is a restart.
	mustEnsure(t, m, sleeperUnit("plain"))
	plain := mustState(t, m, "plain")
	if err := m.Reload(ctx30(t), "plain"); err != nil {
		t.Fatal(err)
	}
	if after := mustState(t, m, "plain"); after.PID == plain.PID || !after.Running {
		t.Fatalf("reload without a signal did not restart: %+v then %+v", plain, after)
	}

	// Restart always restarts.
	if err := m.Restart(ctx30(t), "reloader"); err != nil {
		t.Fatal(err)
	}
	if after := mustState(t, m, "reloader"); after.PID == st.PID || !after.Running {
		t.Fatalf("restart kept the process: %+v then %+v", st, after)
	}

	for _, op := range []func(context.Context, string) error{m.Reload, m.Restart} {
		if err := op(ctx30(t), "never-ensured"); !errors.Is(err, ErrUnknownUnit) {
			t.Errorf("on an unknown unit: %v", err)
		}
	}
}

func TestSystemdStopRemovesTheUnit(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	u := sleeperUnit("stopper")
	u.Env = []string{"TOKEN=s3cr3t"}
	mustEnsure(t, m, u)
	envFile := filepath.Join(sd.base, "env", "stopper.env")
	if info, err := os.Stat(envFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("environment file: %v %v", info, err)
	}
	st := mustState(t, m, "stopper")
	if err := m.Stop(ctx30(t), "stopper"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.State(ctx30(t), "stopper"); !errors.Is(err, ErrUnknownUnit) {
		t.Fatalf("state after stop: %v", err)
	}
	for _, p := range []string{
		filepath.Join(sd.root, "etc/systemd/system", UnitName("stopper")),
		filepath.Join(sd.root, "etc/systemd/system/multi-user.target.wants", UnitName("stopper")),
		envFile,
	} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after stop (%v)", p, err)
		}
	}
	if sd.alive(st.PID) {
		t.Error("the process survived stop")
	}
	if err := m.Stop(ctx30(t), "stopper"); !errors.Is(err, ErrUnknownUnit) {
		t.Fatalf("second stop: %v", err)
	}
	// It can come back.
	if !mustEnsure(t, m, u) || !mustState(t, m, "stopper").Running {
		t.Fatal("the unit did not start again after stop")
	}
}

// pseudoTerminal opens a pseudo-terminal whose output is copied to w,
// and returns the path of its terminal end.
func pseudoTerminal(w io.Writer) (string, func(), error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", nil, err
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return "", nil, err
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return "", nil, err
	}
	path := fmt.Sprintf("/dev/pts/%d", n)
	// Holding the terminal end open keeps reads of the master from
	// failing (EIO) before systemd opens it, or between its writes.
	slave, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return "", nil, err
	}
	done := make(chan struct{})
	go func() {
		io.Copy(w, master)
		close(done)
	}()
	return path, func() {
		slave.Close()
		master.Close()
		<-done
	}, nil
}

// systemctl runs systemctl inside the test systemd's namespaces, for
// failure reports.
func (sd *testSystemd) systemctl(args ...string) string {
	out, _ := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(sd.pid), "--pid", "--mount", "systemctl", "--no-pager"}, args...)...).CombinedOutput()
	return string(out)
}

// alive says whether a PID of systemd's namespace is a live process.
func (sd *testSystemd) alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join(sd.root, "proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// Field 3 is the state; Z is a zombie.
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func TestSystemdStartsAUnitSomeoneStopped(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	mustEnsure(t, m, sleeperUnit("drift"))
	c, err := m.bus(ctx30(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.job(ctx30(t), c, stopUnit, UnitName("drift")); err != nil {
		t.Fatal(err)
	}
	if st := mustState(t, m, "drift"); st.Running {
		t.Fatalf("still running after an operator's stop: %+v", st)
	}
	if !mustEnsure(t, m, sleeperUnit("drift")) || !mustState(t, m, "drift").Running {
		t.Fatal("Ensure did not start a stopped unit")
	}

	// A unit file edited behind the agent's back is put right, and the
	// unit restarted with the agent's definition.
	unitFile := filepath.Join(sd.root, "etc/systemd/system", UnitName("drift"))
	text, _ := os.ReadFile(unitFile)
	writeFile(t, unitFile, strings.Replace(string(text), `"1000"`, `"3000"`, 1), 0o644)
	before := mustState(t, m, "drift")
	if !mustEnsure(t, m, sleeperUnit("drift")) {
		t.Fatal("an edited unit file was not put right")
	}
	if after := mustState(t, m, "drift"); after.PID == before.PID {
		t.Fatal("the unit was not restarted with the restored definition")
	}
	if got, _ := os.ReadFile(unitFile); !bytes.Equal(got, text) {
		t.Fatal("the unit file was not restored")
	}
}

// TestSystemdPassesArgumentsAndEnvironmentExactly runs a unit whose
// arguments and environment hold everything systemd would otherwise
// interpret: quotes, backslashes, specifiers, variables, a lone
// semicolon, white space, newlines and non-ASCII text.
func TestSystemdPassesArgumentsAndEnvironmentExactly(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	out := sd.out("argv")
	dump := sd.script(t, "dump.sh", `out="$1"; shift
{ printf '%s\0' "$@"; printf 'ENV\0'; printf '%s\0' "$A" "$B" "$C"; } > "$out.tmp"
mv "$out.tmp" "$out"
exec sleep 1000
`)
	tricky := []string{
		"plain", "", "two words", `"quoted"`, `'single'`, `back\slash`, `trailing\`,
		"%n %% %i", "$HOME", "${HOME}", "$$", ";", `\;`, "tab\there", "new\nline",
		"ünïcödé ✓", "-dash", "a=b", "#hash", "\x01ctl",
	}
	env := []string{`A=with "quotes" and \ and $HOME and ` + "`tick`", "B=multi\nline", "C="}
	u := Unit{Name: "dumper", Command: append([]string{dump, out}, tricky...), Env: env}
	mustEnsure(t, m, u)
	var got []byte
	testutil.Eventually(t, 30*time.Second, "the unit to write its argv", func() bool {
		var err error
		got, err = os.ReadFile(out)
		return err == nil
	})
	fields := strings.Split(strings.TrimSuffix(string(got), "\x00"), "\x00")
	want := append(slices.Clone(tricky), "ENV", `with "quotes" and \ and $HOME and `+"`tick`", "multi\nline", "")
	if !slices.Equal(fields, want) {
		t.Fatalf("the unit got\n%q\nwant\n%q", fields, want)
	}
}

func TestSystemdRefusesBadUnits(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	for _, u := range []Unit{
		{Name: "", Command: []string{"/bin/true"}},
		{Name: "Bad_Name", Command: []string{"/bin/true"}},
		{Name: "x", Command: []string{"relative"}},
		{Name: "x", Command: []string{"/bin/echo", "bad\xffutf8"}},
		{Name: "x", Command: []string{"/bin/echo"}, Env: []string{"1X=y"}},
		{Name: "x", Command: []string{"/bin/echo"}, Env: []string{"X-Y=z"}},
		{Name: "x", Command: []string{"/bin/echo"}, Env: []string{"X=\xff"}},
	} {
		if _, err := m.Ensure(ctx30(t), u); err == nil {
			t.Errorf("Ensure accepted %+v", u)
		}
	}
	if _, err := os.Stat(filepath.Join(sd.root, "etc/systemd/system", UnitName("x"))); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused unit left a file")
	}
	if _, err := m.State(ctx30(t), "../etc"); err == nil {
		t.Error("State accepted a path as a unit name")
	}
}

func TestDetect(t *testing.T) {
	supCfg := SupervisorConfig{RunDir: t.TempDir(), LogDir: t.TempDir()}
	ctx := ctx30(t)

	// Not booted with systemd: the supervisor.
	m, closeFn, err := detect(ctx, filepath.Join(t.TempDir(), "run-systemd-system"), SystemdConfig{}, supCfg, nil)
	if err != nil || m.Kind() != "supervisor" {
		t.Fatalf("without systemd: %v, %v", m, err)
	}
	closeFn()

	// Booted with systemd, but it does not answer: an error, not a
	// supervisor that would run every daemon a second time.
	booted := t.TempDir()
	_, _, err = detect(ctx, booted, SystemdConfig{Socket: filepath.Join(t.TempDir(), "private")}, supCfg, nil)
	if err == nil || !strings.Contains(err.Error(), "runs systemd") {
		t.Fatalf("systemd booted but unreachable: %v", err)
	}

	// Booted with systemd, and it answers.
	sd := bootSystemd(t)
	m, closeFn, err = detect(ctx, filepath.Join(sd.root, "run/systemd/system"),
		SystemdConfig{Socket: sd.socket, Dial: sd.dial}, supCfg, nil)
	if err != nil || m.Kind() != "systemd" {
		t.Fatalf("with systemd: %v, %v", m, err)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
}

// agentUnit is the shipped unit file of the agent, and agentTmpfiles
// the images' configuration that makes the directories it writes.
const (
	agentUnit     = "../../systemd/harmony-agent.service"
	agentTmpfiles = "../../images/rootfs/etc/tmpfiles.d/harmony-agent.conf"
)

const sandboxEnv = "HARMONY_TEST_AGENT_SANDBOX"

// TestAgentUnitSandboxLetsTheAgentWork runs the shipped agent unit, with
// all its hardening, under the test's systemd, with this test binary in
// place of the agent: TestHelperAgentSandbox does what the agent does
// (write its directories, set a sysctl, use netlink and systemd's D-Bus
// socket, notify READY and STATUS) and reports. The unit's /etc and /var
// are copy-on-write views, so the host is not changed.
func TestAgentUnitSandboxLetsTheAgentWork(t *testing.T) {
	sd := bootSystemdWith(t, true)
	m := sd.manager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The agent binary: a copy of this test binary in the test systemd's
	// /run (the unit's /tmp is private, and /var is an overlay).
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	mustMkdir(t, filepath.Join(sd.root, "run/harmony-test"))
	writeFile(t, filepath.Join(sd.root, "run/harmony-test/harmony-agent"), string(self), 0o755)

	text, err := os.ReadFile(agentUnit)
	if err != nil {
		t.Fatal(err)
	}
	unit := replaceExecStart(t, string(text),
		"ExecStart=/run/harmony-test/harmony-agent -test.run=^TestHelperAgentSandbox$ -test.count=1\n"+
			"Environment="+sandboxEnv+"=/run/harmony-test/result\n")
	writeFile(t, filepath.Join(sd.root, "etc/systemd/system/harmony-agent.service"), unit, 0o644)
	// The directories the unit lets the agent write, made as at an
	// image's boot (systemd-tmpfiles-setup) from the images' own
	// configuration.
	conf, err := filepath.Abs(agentTmpfiles)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(sd.root, "etc/systemd/system/harmony-test-tmpfiles.service"),
		"[Service]\nType=oneshot\nExecStart=/usr/bin/systemd-tmpfiles --create "+conf+"\n", 0o644)

	c, err := m.bus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.daemonReload(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := m.job(ctx, c, startUnit, "harmony-test-tmpfiles.service"); err != nil {
		t.Fatalf("systemd-tmpfiles --create %s: %v\n%s", conf, err, sd.log)
	}
	// Type=notify: the start job ends when the helper sends READY=1.
	if err := m.job(ctx, c, startUnit, "harmony-agent.service"); err != nil {
		result, _ := os.ReadFile(filepath.Join(sd.root, "run/harmony-test/result"))
		t.Fatalf("%v\nhelper's report:\n%s", err, result)
	}
	_, p, err := m.load(ctx, "harmony-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	if p.ActiveState != "active" || p.SubState != "running" {
		result, _ := os.ReadFile(filepath.Join(sd.root, "run/harmony-test/result"))
		t.Fatalf("agent unit %s/%s after READY (last exit: %s)\n%s\nhelper's report:\n%s\nsystemd's log:\n%s", p.ActiveState, p.SubState,
			exitDescription(p.ExecMainCode, p.ExecMainStatus), sd.systemctl("status", "harmony-agent"), result, sd.log)
	}
	prop, err := c.GetServicePropertyContext(ctx, "harmony-agent.service", "StatusText")
	if err != nil {
		t.Fatal(err)
	}
	result, _ := os.ReadFile(filepath.Join(sd.root, "run/harmony-test/result"))
	if status, _ := prop.Value.Value().(string); status != "sandbox checks passed" {
		t.Fatalf("status %q; helper's report:\n%s", status, result)
	}
	t.Logf("inside the agent's sandbox:\n%s", result)
	if err := m.job(ctx, c, stopUnit, "harmony-agent.service"); err != nil {
		t.Fatal(err)
	}
}

// replaceExecStart swaps the unit's ExecStart (with its continuation
// lines) for with.
func replaceExecStart(t *testing.T, unit, with string) string {
	t.Helper()
	var b strings.Builder
	lines := strings.SplitAfter(unit, "\n")
	replaced := false
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "ExecStart=") {
			b.WriteString(lines[i])
			continue
		}
		for strings.HasSuffix(strings.TrimRight(lines[i], "\n"), `\`) {
			i++
		}
		b.WriteString(with)
		replaced = true
	}
	if !replaced {
		t.Fatal("the agent unit has no ExecStart")
	}
	return b.String()
}

// TestHelperAgentSandbox is the stand-in agent, not a test.
func TestHelperAgentSandbox(t *testing.T) {
	resultPath := os.Getenv(sandboxEnv)
	if resultPath == "" {
		t.Skip("run by TestAgentUnitSandboxLetsTheAgentWork inside the agent's unit")
	}
	var report []string
	failed := false
	check := func(what string, err error) {
		if err != nil {
			failed = true
			report = append(report, "FAIL "+what+": "+err.Error())
		} else {
			report = append(report, "ok   "+what)
		}
	}
	n := sdnotify.FromEnvironment(nil)
	check("systemd listens for notifications", func() error {
		if !n.Enabled() || n.WatchdogInterval() != 2*time.Minute {
			return fmt.Errorf("enabled %v, watchdog %v", n.Enabled(), n.WatchdogInterval())
		}
		return nil
	}())
	for _, dir := range []string{"/etc/harmony", "/etc/keepalived", "/etc/haproxy", "/etc/kubernetes", "/etc/cni/net.d",
		"/etc/systemd/system", "/var/lib/harmony", "/var/lib/etcd", "/var/lib/kubelet", "/var/log/kubernetes/audit", "/run"} {
		check("write in "+dir, func() error {
			f := filepath.Join(dir, ".harmony-sandbox-probe")
			if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
				return err
			}
			return os.Remove(f)
		}())
	}
	for _, f := range []string{"/etc/harmony-sandbox-probe", "/usr/local/harmony-sandbox-probe", "/var/lib/harmony-sandbox-probe"} {
		check("no write to "+f, func() error {
			if err := os.WriteFile(f, nil, 0o600); err == nil {
				os.Remove(f)
				return errors.New("the write succeeded")
			}
			return nil
		}())
	}
	check("set a network sysctl", func() error {
		// The test's systemd has a network namespace of its own.
		const p = "/proc/sys/net/ipv4/ip_forward"
		if err := os.WriteFile(p, []byte("1\n"), 0); err != nil {
			return err
		}
		if v, err := os.ReadFile(p); err != nil || string(v) != "1\n" {
			return fmt.Errorf("reads %q (%v)", v, err)
		}
		return nil
	}())
	check("netlink", func() error {
		_, err := netinfo.LinkState(context.Background(), "lo")
		return err
	}())
	check("drive systemd over D-Bus", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m, err := NewSystemd(ctx, SystemdConfig{})
		if err != nil {
			return err
		}
		_, err = m.State(ctx, "sandbox-probe")
		if !errors.Is(err, ErrUnknownUnit) {
			return fmt.Errorf("state of an unknown unit: %v", err)
		}
		return m.Close()
	}())
	os.WriteFile(resultPath, []byte(strings.Join(report, "\n")+"\n"), 0o644)
	status := "sandbox checks passed"
	if failed {
		status = "sandbox checks failed"
	}
	if err := n.Ready(status); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n.Watchdog(ctx, nil)
}

func TestQuoteArg(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", `"plain"`},
		{"", `""`},
		{"two words", `"two words"`},
		{`say "hi"`, `"say \"hi\""`},
		{`back\slash`, `"back\\slash"`},
		{"100%", `"100%%"`},
		{"$HOME ${X}", `"$$HOME $${X}"`},
		{";", `";"`},
		{"a\nb\tc", `"a\nb\tc"`},
		{"\x01\x7f", `"\x01\x7f"`},
		{"ünï ✓", `"ünï ✓"`},
	} {
		got, err := quoteArg(c.in)
		if err != nil || got != c.want {
			t.Errorf("quoteArg(%q) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"nul\x00", "\xff"} {
		if _, err := quoteArg(bad); err == nil {
			t.Errorf("quoteArg(%q) accepted", bad)
		}
	}
}

func TestRenderEnv(t *testing.T) {
	got, err := renderEnv([]string{`A=x "y" \z $v` + "`c`", "B=", "C=two\nlines", "D=e=f"})
	if err != nil {
		t.Fatal(err)
	}
	want := "# Written by harmony-agent. Local edits are replaced.\n" +
		`A="x \"y\" \\z \$v` + "\\`c\\`" + `"` + "\n" +
		`B=""` + "\n" +
		"C=\"two\nlines\"\n" +
		`D="e=f"` + "\n"
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got, err := renderEnv(nil); got != nil || err != nil {
		t.Fatalf("no environment: %q, %v", got, err)
	}
	for _, bad := range []string{"1A=x", "A-B=x", "=x", "A=\xff"} {
		if _, err := renderEnv([]string{bad}); err == nil {
			t.Errorf("renderEnv accepted %q", bad)
		}
	}
}

func testSystemdConfig() SystemdConfig {
	return SystemdConfig{EnvDir: DefaultEnvDir, RestartSec: 2 * time.Second, StopTimeout: 10 * time.Second}
}

func TestRenderUnit(t *testing.T) {
	u := Unit{Name: "haproxy", Command: []string{"/usr/sbin/haproxy", "-W", "-db", "-f", "/etc/haproxy/haproxy.cfg"},
		ReloadSignal: syscall.SIGUSR2}
	text, err := renderUnit(u, testSystemdConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nExecStart=\"/usr/sbin/haproxy\" \"-W\" \"-db\" \"-f\" \"/etc/haproxy/haproxy.cfg\"\n",
		"\nExecReload=/bin/sh -c \"kill -USR2 $$MAINPID\"\n",
		"\nRestart=always\n", "\nRestartSec=2000ms\n", "\nTimeoutStopSec=10000ms\n",
		"\nStartLimitIntervalSec=0\n", "\nNoNewPrivileges=yes\n", "\nProtectSystem=full\n",
		"\nWantedBy=multi-user.target\n",
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("unit lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(string(text), "EnvironmentFile") {
		t.Error("a unit without environment names an environment file")
	}
	// Same input, same bytes; another environment, another unit.
	again, _ := renderUnit(u, testSystemdConfig(), nil)
	env1, _ := renderEnv([]string{"A=1"})
	env2, _ := renderEnv([]string{"A=2"})
	with1, _ := renderUnit(u, testSystemdConfig(), env1)
	with2, _ := renderUnit(u, testSystemdConfig(), env2)
	if !bytes.Equal(text, again) || bytes.Equal(with1, with2) ||
		!strings.Contains(string(with1), "\nEnvironmentFile=/etc/harmony/services/haproxy.env\n") {
		t.Fatalf("rendering is not a function of the definition:\n%s\n%s", with1, with2)
	}
	// No reload signal, no ExecReload: Reload then restarts.
	u.ReloadSignal = 0
	if text, _ := renderUnit(u, testSystemdConfig(), nil); strings.Contains(string(text), "ExecReload") {
		t.Error("ExecReload without a reload signal")
	}
}

// TestRenderedUnitsVerify has systemd's own checker read rendered units.
func TestRenderedUnitsVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatalf("systemd-analyze is part of systemd, which the images ship: %v", err)
	}
	dir := t.TempDir()
	cfg := testSystemdConfig()
	cfg.EnvDir = dir
	env, _ := renderEnv([]string{"A=b c", `B="q"`})
	writeFile(t, filepath.Join(dir, "tricky.env"), string(env), 0o600)
	for _, c := range []struct {
		u   Unit
		env []byte
	}{
		{Unit{Name: "keepalived", Command: []string{"/bin/sleep", "--dont-fork", "--use-file", "/etc/keepalived/keepalived.conf"}, ReloadSignal: syscall.SIGHUP}, nil},
		{Unit{Name: "tricky", Command: []string{"/bin/echo", "", ";", `\;`, "%n", "$X", "${Y}", `"`, "'", "a\nb", "ü"}, Env: []string{"A=b c", `B="q"`}}, env},
		{Unit{Name: "rt", Command: []string{"/bin/sleep", "1"}, ReloadSignal: syscall.Signal(40)}, nil},
	} {
		text, err := renderUnit(c.u, cfg, c.env)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, UnitName(c.u.Name))
		writeFile(t, path, string(text), 0o644)
		if out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s\n%s", c.u.Name, err, out, text)
		}
	}
}

// TestAgentUnitFile checks the shipped unit with systemd's own tools, and
// that it keeps what the agent relies on.
func TestAgentUnitFile(t *testing.T) {
	text, err := os.ReadFile(agentUnit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "NotifyAccess=main", "WatchdogSec=", "Restart=always",
		"StartLimitIntervalSec=0", "ProtectSystem=strict", "NoNewPrivileges=yes", "ProtectHome=yes", "PrivateTmp=yes",
		"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK\n", "LockPersonality=yes", "ProtectKernelModules=yes",
		"ReadWritePaths=/etc/systemd/system /run\n", "CAP_NET_ADMIN"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the agent unit lacks %q", want)
		}
	}
	// verify wants ExecStart's binary to exist; the agent is not
	// installed here, so check a copy that runs /bin/true.
	copyPath := filepath.Join(t.TempDir(), "harmony-agent.service")
	writeFile(t, copyPath, replaceExecStart(t, string(text), "ExecStart=/bin/true\n"), 0o644)
	if out, err := exec.Command("systemd-analyze", "verify", copyPath).CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command("systemd-analyze", "security", "--offline=true", copyPath).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("systemd-analyze security: %s", lines[len(lines)-1])
}

// TestAgentDirectoriesExistAtBoot: every directory the agent's unit
// lets it write but may not find ("-" in ReadWritePaths) is made by the
// images' tmpfiles configuration, with its mode, by systemd-tmpfiles
// itself. Only the kubelet link's directory is the image's own.
func TestAgentDirectoriesExistAtBoot(t *testing.T) {
	text, err := os.ReadFile(agentUnit)
	if err != nil {
		t.Fatal(err)
	}
	var optional []string
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, "ReadWritePaths="); ok {
			for _, f := range strings.Fields(v) {
				if p, ok := strings.CutPrefix(f, "-"); ok && p != filepath.Dir(components.KubeletLink) {
					optional = append(optional, p)
				}
			}
		}
	}
	if len(optional) < 9 {
		t.Fatalf("found %d optional ReadWritePaths in the unit, want the stack's nine or more: %v", len(optional), optional)
	}
	root := t.TempDir()
	f, err := os.Open(agentTmpfiles)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// From stdin: --root would prefix a configuration file's path too.
	cmd := exec.Command("systemd-tmpfiles", "--create", "--root="+root, "-")
	cmd.Stdin = f
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("systemd-tmpfiles --create %s: %v\n%s", agentTmpfiles, err, out)
	}
	private := map[string]bool{"/var/lib/etcd": true, "/var/contiv": true, "/var/lib/contiv": true, "/var/log/kubernetes/audit": true}
	for _, p := range optional {
		fi, err := os.Stat(filepath.Join(root, p))
		want := os.FileMode(0o755)
		if private[p] {
			want = 0o700
		}
		switch {
		case err != nil:
			t.Errorf("%s is writable for the agent but not made at boot: %v", p, err)
		case !fi.IsDir() || fi.Mode().Perm() != want:
			t.Errorf("%s: mode %s, want a directory %s", p, fi.Mode(), want)
		}
	}
}

// TestShippedUnitFilesVerify has systemd's checker read every unit the
// images ship (the agent's, the network's, the data disk's, kubelet's
// with its drop-in, the controller's and its backup's, with the timer).
// Only the binaries the images install may be missing here; any other
// complaint, such as a key in the wrong section, which systemd ignores,
// fails.
func TestShippedUnitFilesVerify(t *testing.T) {
	units, _ := filepath.Glob("../../systemd/*.service")
	timers, _ := filepath.Glob("../../systemd/*.timer")
	units = append(units, timers...)
	if len(units) < 8 {
		t.Fatalf("found %d shipped units, want the eight in systemd/", len(units))
	}
	installed := regexp.MustCompile(`^[a-z-]+\.service: Command (/usr/local/bin/harmony-(agent|controller)|/usr/bin/kubelet) is not executable: No such file or directory$`)
	for _, path := range units {
		out, _ := exec.Command("systemd-analyze", "verify", "--man=no", path).CombinedOutput()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !installed.MatchString(line) {
				t.Errorf("systemd-analyze verify %s: %s", filepath.Base(path), line)
			}
		}
	}
}

// TestSystemdGivesUpOnASilentSocket: a systemd that accepts but never
// answers (hung, or mid-reexec) holds NewSystemd no longer than its ctx.
func TestSystemdGivesUpOnASilentSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "private")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := NewSystemd(ctx, SystemdConfig{Socket: path})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("connected to a socket that never answered")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("NewSystemd still waiting 30s after its context ended")
	}
}

// TestDrainingConnFinishesAMessageAfterClose: the reader gets what was
// sent before the close, then the end, and then the file is closed.
// godbus v5.1.0 panics when a read fails midway through a message.
func TestDrainingConnFinishesAMessageAfterClose(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range pair {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	peer := conns[1]
	defer peer.Close()
	c := &drainingConn{UnixConn: conns[0]}
	if _, err := peer.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 4)
	if _, err := io.ReadFull(c, head); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(c)
	if err != nil || string(head)+string(rest) != "0123456789" {
		t.Fatalf("read %q then %q (%v)", head, rest, err)
	}
	// The peer sees the end, and the file is closed.
	if n, err := peer.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("peer read %d, %v; want EOF", n, err)
	}
	if _, err := conns[0].Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after the end: %v, want the file closed", err)
	}
}

// inNetns runs f on a thread in the network namespace of pid.
func inNetns(pid int, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: Go discards the thread with the goroutine.
		runtime.LockOSThread()
		h, err := netns.GetFromPath(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// httpGet asks addr for path over plain HTTP/1.0 from inside systemd's
// network namespace; net/http would dial on another thread.
func (sd *testSystemd) httpGet(addr, path string) (string, error) {
	var body string
	err := inNetns(sd.pid, func() error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr); err != nil {
			return err
		}
		b, err := io.ReadAll(c)
		body = string(b)
		return err
	})
	return body, err
}

// httpOK says whether a raw HTTP response has status 200.
func httpOK(resp string) bool {
	status, _, _ := strings.Cut(resp, "\r\n")
	return strings.HasPrefix(status, "HTTP/1.") && strings.HasSuffix(status, " 200 OK")
}

func (sd *testSystemd) ip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(sd.pid), "--net", "ip"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	return string(out)
}

// TestSystemdRunsTheStackDaemonsHardened runs Debian's keepalived, HAProxy
// and etcd as the components define them, under the unit files the
// manager writes, hardening included, and checks each does its job.
func TestSystemdRunsTheStackDaemonsHardened(t *testing.T) {
	for _, bin := range []string{"/usr/sbin/keepalived", "/usr/sbin/haproxy", "/usr/bin/etcd"} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("the stack's daemons are installed by scripts/install-deps.sh: %v", err)
		}
	}
	sd := bootSystemd(t)
	m := sd.manager(t)
	dir := filepath.Join(sd.base, "stack")
	mustMkdir(t, dir)

	// HAProxy, master-worker in the foreground, reloaded by SIGUSR2.
	writeFile(t, filepath.Join(dir, "haproxy.cfg"), `global
    log stderr format raw local0
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend stats
    bind 127.0.0.1:8404
    http-request use-service prometheus-exporter if { path /metrics }
`, 0o644)
	haproxy := Unit{Name: "haproxy", Command: []string{"/usr/sbin/haproxy", "-W", "-db", "-f", filepath.Join(dir, "haproxy.cfg")},
		ReloadSignal: syscall.SIGUSR2}
	mustEnsure(t, m, haproxy)

	// etcd, with its data on /var, which ProtectSystem=full leaves
	// writable.
	etcd := Unit{Name: "etcd", Command: []string{"/usr/bin/etcd", "--name", "t", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "t=http://127.0.0.1:2380"}}
	// No reload signal: etcd 3.4 has no SIGHUP handler, and dies of one.
	mustEnsure(t, m, etcd)

	// keepalived on a veth in systemd's network namespace, alone, so it
	// becomes master and adds the VIP.
	sd.ip(t, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	sd.ip(t, "link", "set", "eth0", "up")
	sd.ip(t, "link", "set", "eth1", "up")
	sd.ip(t, "addr", "add", "198.18.60.2/24", "dev", "eth0")
	writeFile(t, filepath.Join(dir, "keepalived.conf"), `global_defs {
    router_id t
    enable_script_security
    script_user root
}
vrrp_instance harmony_t {
    state BACKUP
    interface eth0
    virtual_router_id 51
    priority 200
    advert_int 1
    authentication {
        auth_type PASS
        auth_pass s3cr3t
    }
    virtual_ipaddress {
        198.18.60.10/32 dev eth0
    }
}
`, 0o600)
	// The keepalived component creates its run directory; so does the test.
	mustMkdir(t, filepath.Join(sd.root, "run/keepalived"))
	keepalived := Unit{Name: "keepalived", Command: []string{"/usr/sbin/keepalived", "--dont-fork", "--log-console", "--log-detail",
		"--use-file", filepath.Join(dir, "keepalived.conf"),
		"--pid", "/run/keepalived/keepalived.pid", "--vrrp_pid", "/run/keepalived/vrrp.pid", "--checkers_pid", "/run/keepalived/checkers.pid"},
		ReloadSignal: syscall.SIGHUP}
	mustEnsure(t, m, keepalived)

	var last string
	testutil.Eventually(t, 60*time.Second, "HAProxy to serve /metrics", func() bool {
		last, _ = sd.httpGet("127.0.0.1:8404", "/metrics")
		return httpOK(last) && strings.Contains(last, "haproxy_process_")
	}, func() { t.Logf("last answer %.300q\n%s", last, sd.systemctl("status", "harmony-haproxy")) })
	testutil.Eventually(t, 60*time.Second, "etcd to be healthy", func() bool {
		last, _ = sd.httpGet("127.0.0.1:2379", "/health")
		return httpOK(last) && strings.Contains(last, `"health":"true"`)
	}, func() { t.Logf("last answer %.300q\n%s", last, sd.systemctl("status", "harmony-etcd")) })
	testutil.Eventually(t, 60*time.Second, "keepalived to hold the VIP", func() bool {
		return strings.Contains(sd.ip(t, "-o", "addr", "show", "dev", "eth0"), "198.18.60.10/32")
	}, func() { t.Logf("%s", sd.systemctl("status", "harmony-keepalived")) })

	// Reloads by signal keep the main process; each daemon survives its
	// own reload.
	for _, name := range []string{"haproxy", "keepalived"} {
		before := mustState(t, m, name)
		if err := m.Reload(ctx30(t), name); err != nil {
			t.Fatalf("reload %s: %v", name, err)
		}
		time.Sleep(time.Second)
		if after := mustState(t, m, name); !after.Running || after.PID != before.PID || after.Restarts != 0 {
			t.Errorf("%s after reload: %+v, before %+v\n%s", name, after, before, sd.systemctl("status", "harmony-"+name))
		}
	}
	testutil.Eventually(t, 60*time.Second, "HAProxy to serve after its reload", func() bool {
		last, _ = sd.httpGet("127.0.0.1:8404", "/metrics")
		return httpOK(last)
	})
	// etcd's reload is a restart, and it comes back healthy on its data.
	before := mustState(t, m, "etcd")
	if err := m.Reload(ctx30(t), "etcd"); err != nil {
		t.Fatal(err)
	}
	if after := mustState(t, m, "etcd"); after.PID == before.PID {
		t.Errorf("etcd was not restarted by its reload: %+v", after)
	}
	testutil.Eventually(t, 60*time.Second, "etcd to be healthy after its restart", func() bool {
		last, _ = sd.httpGet("127.0.0.1:2379", "/health")
		return httpOK(last) && strings.Contains(last, `"health":"true"`)
	})
}

func TestTransientCommand(t *testing.T) {
	got := TransientCommand("kubeadm-reset", 90*time.Second, []string{"/usr/bin/kubeadm", "reset", "--force"})
	want := []string{"systemd-run", "--wait", "--pipe", "--quiet", "--collect", "--service-type=exec",
		"--unit=harmony-kubeadm-reset.service", "--property=RuntimeMaxSec=90", "--",
		"/usr/bin/kubeadm", "reset", "--force"}
	if !slices.Equal(got, want) {
		t.Errorf("TransientCommand =\n%q\nwant\n%q", got, want)
	}
}
