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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
}

var stubTargets = []string{"harmony-test.target", "multi-user.target", "sysinit.target", "basic.target",
	"shutdown.target", "network-online.target", "network.target", "local-fs.target", "sockets.target"}

// bootSystemd boots a systemd for one test and tears it down after.
func bootSystemd(t *testing.T) *testSystemd {
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
		t.Fatal(err)
	}
	stubs := filepath.Join(base, "stubs")
	mustMkdir(t, stubs, filepath.Join(base, "bin"), filepath.Join(base, "out"))
	for _, target := range stubTargets {
		writeFile(t, filepath.Join(stubs, target), "[Unit]\nDescription=test stand-in for "+target+"\n", 0o644)
	}
	console := filepath.Join(base, "console.log")
	writeFile(t, console, "", 0o644)

	// Every mount is private to the new mount namespace. /dev/console is
	// replaced by a file, so that systemd's log is kept and the host's
	// console is left alone.
	script := `set -e
mount --make-rprivate /
mount --bind "$HARMONY_CONSOLE" /dev/console
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=0755 tmpfs /etc/systemd/system
mount -t proc proc /proc
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
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
		UseCgroupFD: true,
		CgroupFD:    cgfd,
		Pdeathsig:   syscall.SIGKILL,
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err = cmd.Start()
	syscall.Close(cgfd)
	if err != nil {
		os.RemoveAll(base)
		os.Remove(cgroup)
		skip("start: %v", err)
	}
	sd := &testSystemd{pid: cmd.Process.Pid, base: base, cgroup: cgroup}
	sd.root = fmt.Sprintf("/proc/%d/root", sd.pid)
	sd.socket = filepath.Join(sd.root, "run/systemd/private")
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		sd.kill(t)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("systemd (pid %d) did not exit", sd.pid)
		}
		sd.removeCgroups(t)
		os.RemoveAll(base)
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
			log, _ := os.ReadFile(console)
			skip("systemd exited: %s\n%s\n%s", cmd.ProcessState, stderr.String(), log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(console)
			skip("no answer on %s within a minute (state %q, %v)\n%s\n%s", sd.socket, state, err, stderr.String(), log)
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
	conn, err := sd.dial(ctx)
	if err != nil {
		return "", err
	}
	c, err := newBusConn(ctx, conn)
	if err != nil {
		return "", err
	}
	defer c.Close()
	out, err := c.call(ctx, managerPath, propsIface, "Get", "ss", managerIface, "SystemState")
	if err != nil {
		return "", err
	}
	s, _ := out[0].(variant).value.(string)
	return s, nil
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
	if _, err := c.call(ctx30(t), managerPath, managerIface, "KillUnit", "ssi", UnitName(name), "main", int32(sig)); err != nil {
		t.Fatal(err)
	}
}

func TestSystemdReloadAndRestart(t *testing.T) {
	sd := bootSystemd(t)
	m := sd.manager(t)
	hups := sd.out("hups")
	loop := sd.script(t, "hup-loop.sh", `trap 'echo hup >> "$1"' HUP
while :; do sleep 0.1; done
`)
	u := Unit{Name: "reloader", Command: []string{loop, hups}, ReloadSignal: syscall.SIGHUP}
	mustEnsure(t, m, u)
	st := mustState(t, m, "reloader")
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
	if err := m.job(ctx30(t), c, "StopUnit", UnitName("drift")); err != nil {
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
