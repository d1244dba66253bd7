// Package body turns a powered-on VM of the lab's vCenter into a "body":
// the node image's own root file system, booted with its own systemd as
// PID 1 by systemd-nspawn, in the VM's network namespace, over a
// copy-on-write layer (the lab's linked clone).
//
// The image's root partition is mounted read-only once per image
// (PrepareImage). Each body's writable layer is an overlayfs that nspawn
// itself mounts (--overlay=LOWER:UPPER:/) in the container's own mount
// namespace: it exists only while the body runs and goes with it, whatever
// killed it, so neither a crash of the lab nor another process's copy of
// the host's mount table can leave it behind. The upper directory, the
// VM's disk, stays in the state directory for the next power-on.
//
// nspawn runs in its own session, detached from the process that started
// it, with its console in the state directory. body.json there names it,
// so that a later process (`lab down`, or a lab recovering from a crash)
// can Open the body and stop it, or Cleanup with only the directory.
package body

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/harmonykaas/harmony/internal/atomicfile"

	"github.com/harmonykaas/harmony/internal/procfs"
)

// Files and directories in a body's state directory.
const (
	recordFile  = "body.json"
	upperDir    = "upper"
	consoleFile = "console.log"
)

// Bounds.
const (
	// DefaultStopTimeout bounds a clean shutdown. The agent's unit allows
	// itself 30 s to stop.
	DefaultStopTimeout = 45 * time.Second
	initTimeout        = 15 * time.Second
	killTimeout        = 10 * time.Second
)

// bodyPath is the PATH of nspawn and of commands run in a body.
const bodyPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// sigPowerOff is SIGRTMIN+3, which makes systemd power off: glibc's
// SIGRTMIN is 34 (the kernel's first two real-time signals are its own).
const sigPowerOff = syscall.Signal(34 + 3)

// ErrRunning is returned by Start for a state directory whose body runs.
var ErrRunning = errors.New("body already running")

// Bind is a host path made visible in a body.
type Bind struct {
	Host     string // absolute path on the host
	Body     string // absolute path in the body; default Host
	ReadOnly bool
}

// Spec says what body to start.
type Spec struct {
	// Name is the machine name, and the hostname unless Hostname is set:
	// letters, digits, '-' and '.', at most 64. As on a VM, the image's
	// /etc/hostname replaces it when systemd boots, until the agent sets
	// the node's name.
	Name     string
	Hostname string
	// UUID, if set, is the machine's UUID; systemd in the body makes its
	// machine ID from it. Give a VM's UUID for an ID stable across boots.
	UUID string
	// ImageRoot is the image's root file system (Image.Root), the lower
	// layer. It is never written.
	ImageRoot string
	// StateDir holds the body's upper layer, console log and record.
	StateDir string
	// Netns names the network namespace, /run/netns/NETNS, made by the
	// caller.
	Netns string
	// GuestinfoDir, if set, is the host directory holding the guestinfo
	// socket (see ListenGuestinfo), bound at GuestinfoDirInBody.
	GuestinfoDir string
	// RPCTool, if set, is the host path of the stand-in vmware-rpctool
	// (static), bound read-only at RPCToolInBody.
	RPCTool string
	Binds   []Bind
	// Env is added to nspawn's environment, for example
	// SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1.
	Env []string
	// Args are added to nspawn's command line, before the --boot
	// arguments end it.
	Args []string
	Log  *slog.Logger
}

// record is body.json: enough for another process to find the body.
type record struct {
	Name      string      `json:"name"`
	Nspawn    procfs.Proc `json:"nspawn"`
	Init      procfs.Proc `json:"init"`
	ImageRoot string      `json:"imageRoot"`
	Netns     string      `json:"netns"`
	Started   time.Time   `json:"started"`
	// Cgroups are the body's own, one per hierarchy.
	Cgroups []string `json:"cgroups"`
}

// Body is a started body.
type Body struct {
	Name     string
	StateDir string
	// Nspawn is the systemd-nspawn process; Init is the body's PID 1, its
	// child in a PID namespace of its own.
	Nspawn procfs.Proc
	Init   procfs.Proc
	// Started is when nspawn was started: the VM's power-on.
	Started time.Time
	cgroups []string
	log     *slog.Logger
}

var machineName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,63}$`)

func (s *Spec) check() error {
	if !machineName.MatchString(s.Name) {
		return fmt.Errorf("body name %q: want letters, digits, '-' and '.', at most 64", s.Name)
	}
	if s.Hostname != "" && !machineName.MatchString(s.Hostname) {
		return fmt.Errorf("body %s: hostname %q: want letters, digits, '-' and '.', at most 64", s.Name, s.Hostname)
	}
	if s.Netns == "" || strings.ContainsAny(s.Netns, "/\x00") || s.Netns == "." || s.Netns == ".." {
		return fmt.Errorf("body %s: network namespace name %q", s.Name, s.Netns)
	}
	if _, err := os.Stat(netnsPath(s.Netns)); err != nil {
		return fmt.Errorf("body %s: network namespace: %w", s.Name, err)
	}
	for _, p := range []struct{ what, path string }{{"image root", s.ImageRoot}, {"state dir", s.StateDir}} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("body %s: %s %q: want an absolute path", s.Name, p.what, p.path)
		}
	}
	if _, err := os.Stat(filepath.Join(s.ImageRoot, "usr/lib/systemd/systemd")); err != nil {
		return fmt.Errorf("body %s: image root %s has no systemd: %w", s.Name, s.ImageRoot, err)
	}
	for _, b := range s.binds() {
		if !filepath.IsAbs(b.Host) || !filepath.IsAbs(b.Body) {
			return fmt.Errorf("body %s: bind %s:%s: want absolute paths", s.Name, b.Host, b.Body)
		}
		if _, err := os.Stat(b.Host); err != nil {
			return fmt.Errorf("body %s: bind: %w", s.Name, err)
		}
	}
	return nil
}

// binds returns every bind of the body: the guestinfo ones, then Binds.
func (s *Spec) binds() []Bind {
	var bs []Bind
	if s.GuestinfoDir != "" {
		bs = append(bs, Bind{Host: s.GuestinfoDir, Body: GuestinfoDirInBody})
	}
	if s.RPCTool != "" {
		bs = append(bs, Bind{Host: s.RPCTool, Body: RPCToolInBody, ReadOnly: true})
	}
	for _, b := range s.Binds {
		if b.Body == "" {
			b.Body = b.Host
		}
		bs = append(bs, b)
	}
	return bs
}

func netnsPath(name string) string { return filepath.Join("/run/netns", name) }

// nspawnArgs is nspawn's command line for the spec.
func (s *Spec) nspawnArgs() []string {
	hostname := s.Hostname
	if hostname == "" {
		hostname = s.Name
	}
	args := []string{
		// Not --boot: the body's first process prepares what a VM's
		// guest has, then execs the image's systemd (bodyInit). As with
		// --boot, stopping nspawn asks that systemd to power off.
		"--kill-signal=SIGRTMIN+3",
		"--directory=" + s.ImageRoot,
		// The copy-on-write layer, mounted by nspawn in the container's
		// mount namespace: it cannot outlive the body.
		"--overlay=" + escapeColon(s.ImageRoot) + ":" + escapeColon(filepath.Join(s.StateDir, upperDir)) + ":/",
		"--machine=" + s.Name,
		"--hostname=" + hostname,
		"--network-namespace-path=" + netnsPath(s.Netns),
		// The namespace is the body's own, as a VM's NICs are: its
		// networkd, keepalived and agent configure it. nspawn keeps
		// CAP_NET_ADMIN only for --private-network.
		"--capability=CAP_NET_ADMIN",
		// runc, under the image's containerd, gives each container a
		// session keyring; nspawn's default filter refuses keyctl.
		"--system-call-filter=@keyring",
		// No systemd on the lab host to register with or to make a scope.
		"--register=no",
		"--keep-unit",
		// The console is logged, never attached to a terminal.
		"--console=read-only",
		// The body is the image alone: nothing of the host's journal,
		// resolver or time zone.
		"--link-journal=no",
		"--resolv-conf=off",
		"--timezone=off",
	}
	if s.UUID != "" {
		args = append(args, "--uuid="+s.UUID)
	}
	args = append(args, "--bind-ro="+escapeColon(filepath.Join(s.StateDir, kernelDir))+":"+kernelDirInBody)
	for _, b := range s.binds() {
		opt := "--bind="
		if b.ReadOnly {
			opt = "--bind-ro="
		}
		args = append(args, opt+escapeColon(b.Host)+":"+escapeColon(b.Body))
	}
	args = append(args, s.Args...)
	return append(append(args, "--"), bodyInit()...)
}

// escapeColon escapes what nspawn's path lists treat specially.
func escapeColon(p string) string {
	return strings.NewReplacer(`\`, `\\`, ":", `\:`).Replace(p)
}

// Start boots a body and returns once its PID 1 runs; WaitSettled waits for
// its boot. The body outlives ctx and the calling process: stop it with
// Stop, Kill or Cleanup.
func Start(ctx context.Context, s Spec) (*Body, error) {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("body", s.Name)
	if err := s.check(); err != nil {
		return nil, err
	}
	nspawn, err := exec.LookPath("systemd-nspawn")
	if err != nil {
		return nil, fmt.Errorf("body %s: %w (Debian: apt-get install systemd-container)", s.Name, err)
	}
	if rec, err := readRecord(s.StateDir); err == nil {
		if rec.Nspawn.Alive() {
			return nil, fmt.Errorf("body %s in %s: %w (pid %d)", s.Name, s.StateDir, ErrRunning, rec.Nspawn.PID)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// Whatever a crashed run left, go.
	if err := Cleanup(ctx, s.StateDir, log); err != nil {
		return nil, err
	}
	// The upper directory is the root directory of the body: 0755, root's.
	if err := os.MkdirAll(filepath.Join(s.StateDir, upperDir), 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(s.StateDir, upperDir), 0o755); err != nil {
		return nil, err
	}
	console, err := os.OpenFile(filepath.Join(s.StateDir, consoleFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer console.Close()
	fmt.Fprintf(console, "\n=== harmony lab: starting body %s at %s\n", s.Name, time.Now().UTC().Format(time.RFC3339))

	if err := writeTunables(s.StateDir); err != nil {
		return nil, fmt.Errorf("body %s: %w", s.Name, err)
	}
	cgroups, err := makeCgroups(s.StateDir)
	if err != nil {
		return nil, fmt.Errorf("body %s: %w", s.Name, err)
	}
	// Not CommandContext: the body outlives ctx. The shell joins the
	// body's cgroups, then becomes nspawn.
	argv := []string{"-c", joinScript, "sh"}
	for _, dir := range cgroups {
		argv = append(argv, filepath.Join(dir, "cgroup.procs"))
	}
	argv = append(append(argv, "--", nspawn), s.nspawnArgs()...)
	cmd := exec.Command("/bin/sh", argv...)
	cmd.Stdout, cmd.Stderr = console, console
	// /proc/sys/net writable, as in a VM: the body has a network
	// namespace of its own, whose sysctls (forwarding, conntrack
	// timeouts, route_localnet) its agent and kube-proxy set. The rest of
	// /proc/sys stays read-only, as nspawn makes it.
	cmd.Env = append([]string{bodyPath, "SYSTEMD_NSPAWN_API_VFS_WRITABLE=network"}, s.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	log.Debug("starting body", "argv", cmd.Args, "env", s.Env)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start systemd-nspawn for body %s: %w", s.Name, err)
	}
	// Reap it if it ends while this process runs; after that, init does.
	go cmd.Wait()

	b := &Body{Name: s.Name, StateDir: s.StateDir, cgroups: cgroups, log: log}
	b.Nspawn, err = procfs.Of(cmd.Process.Pid)
	if err != nil {
		// It already ended: the console says why.
		return nil, fmt.Errorf("body %s: systemd-nspawn exited at once: %s", s.Name, consoleTail(s.StateDir))
	}
	b.Started = time.Now().UTC()
	rec := record{Name: s.Name, Nspawn: b.Nspawn, ImageRoot: s.ImageRoot, Netns: s.Netns, Started: b.Started, Cgroups: cgroups}
	if err := writeRecord(s.StateDir, rec); err != nil {
		b.Kill(ctx)
		return nil, err
	}
	if err := b.waitInit(ctx); err != nil {
		b.Kill(context.WithoutCancel(ctx))
		return nil, err
	}
	rec.Init = b.Init
	if err := writeRecord(s.StateDir, rec); err != nil {
		b.Kill(ctx)
		return nil, err
	}
	log.Info("body started", "nspawn_pid", b.Nspawn.PID, "init_pid", b.Init.PID, "netns", s.Netns)
	return b, nil
}

// waitInit waits until nspawn has started the body's PID 1: until it
// has left nspawn's executable, it is nspawn's own child, still setting
// the body up.
func (b *Body) waitInit(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	for {
		if p, ok := containerInit(b.Nspawn.PID); ok && !sameExecutable(p.PID, b.Nspawn.PID) {
			b.Init = p
			return nil
		}
		if !b.Nspawn.Alive() {
			return fmt.Errorf("body %s: systemd-nspawn exited: %s", b.Name, consoleTail(b.StateDir))
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("body %s: waiting for its PID 1: %w: %s", b.Name, err, consoleTail(b.StateDir))
		}
	}
}

// Open finds the body started in stateDir, by another process perhaps.
func Open(stateDir string, log *slog.Logger) (*Body, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rec, err := readRecord(stateDir)
	if err != nil {
		return nil, err
	}
	return &Body{Name: rec.Name, StateDir: stateDir, Nspawn: rec.Nspawn, Init: rec.Init, Started: rec.Started, cgroups: rec.Cgroups, log: log.With("body", rec.Name)}, nil
}

// Running reports whether the body's nspawn still runs.
func (b *Body) Running() bool { return b.Nspawn.Alive() }

// Stop shuts the body down cleanly: SIGTERM makes nspawn send SIGRTMIN+3
// to the body's systemd, which powers off. After timeout (or when ctx is
// done) the body is killed. Either way, nothing of it remains afterwards.
func (b *Body) Stop(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	if b.Nspawn.Alive() || b.Init.Alive() {
		var err error
		if b.Nspawn.Alive() {
			err = signal(b.Nspawn, syscall.SIGTERM)
		} else {
			// nspawn was killed and left the body running: ask its
			// systemd directly, as nspawn would have.
			err = signal(b.Init, sigPowerOff)
		}
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, timeout)
		err = b.waitGone(wctx)
		cancel()
		if err != nil {
			b.log.Warn("body did not shut down in time; killing it", "timeout", timeout, "err", err)
		} else {
			b.log.Info("body shut down")
		}
	}
	// Kill also cleans up, and does nothing to processes already gone.
	return b.Kill(context.WithoutCancel(ctx))
}

// Kill ends the body at once: SIGKILL to its PID 1 ends every process in
// its PID namespace, and nspawn, its parent, reaps it and exits; nspawn is
// killed too if it lingers. Then Kill cleans up.
func (b *Body) Kill(ctx context.Context) error {
	pid1 := b.Init
	if !pid1.Alive() {
		// Perhaps not recorded yet: ask nspawn.
		if p, ok := containerInit(b.Nspawn.PID); ok && b.Nspawn.Alive() {
			pid1 = p
		}
	}
	b.Init = pid1
	wctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	var errs []error
	if err := signal(pid1, syscall.SIGKILL); err != nil {
		errs = append(errs, err)
	}
	// Let nspawn see its child end, reap it and exit by itself: killed
	// at the same time, it would leave the child to the host's init.
	gctx, gcancel := context.WithTimeout(wctx, 3*time.Second)
	b.waitGone(gctx)
	gcancel()
	if err := signal(b.Nspawn, syscall.SIGKILL); err != nil {
		errs = append(errs, err)
	}
	if err := b.waitGone(wctx); err != nil {
		errs = append(errs, fmt.Errorf("body %s: still running after SIGKILL: %w", b.Name, err))
		return errors.Join(errs...)
	}
	errs = append(errs, cleanupState(ctx, b.StateDir, b.cgroups), removePropagateDir(b.Name))
	return errors.Join(errs...)
}

// propagateDir is where nspawn keeps, on the host, the directory it
// offers a body for mounts made later (--bind at run time). nspawn removes
// it when it exits, but not when it is killed.
func propagateDir(name string) string { return filepath.Join("/run/systemd/nspawn/propagate", name) }

func removePropagateDir(name string) error {
	if !machineName.MatchString(name) {
		return nil // not a name we start bodies with; leave it
	}
	// Remove, not RemoveAll: it is empty unless a body runs with the
	// name, and then it is not ours to take.
	if err := os.Remove(propagateDir(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("body %s: %w", name, err)
	}
	return nil
}

// waitGone waits until nspawn and the body's PID 1 have both ended.
func (b *Body) waitGone(ctx context.Context) error {
	for b.Nspawn.Alive() || b.Init.Alive() {
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// Cleanup ends what a body in stateDir left, knowing only the directory:
// after a crash of the process that started it, or before a new start. It
// kills the body if it still runs and removes its mounts and record; the
// upper layer (the VM's disk) stays.
func Cleanup(ctx context.Context, stateDir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rec, err := readRecord(stateDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return cleanupState(ctx, stateDir, nil)
	case err != nil:
		return err
	}
	b := &Body{Name: rec.Name, StateDir: stateDir, Nspawn: rec.Nspawn, Init: rec.Init, cgroups: rec.Cgroups, log: log.With("body", rec.Name)}
	if b.Nspawn.Alive() || b.Init.Alive() {
		log.Info("killing a body left running", "body", rec.Name, "nspawn_pid", rec.Nspawn.PID)
	}
	return b.Kill(ctx)
}

// cleanupState removes what may remain of a body that no longer runs:
// mounts under the state directory (none, unless something other than
// nspawn made them), the overlay work directories a killed nspawn leaves
// (".#upper…"), its cgroups (those recorded, and those this process would
// have made for it), and the record.
func cleanupState(ctx context.Context, stateDir string, cgroups []string) error {
	var errs []error
	if _, own, err := cgroupDirs(stateDir); err == nil {
		cgroups = append(cgroups, own...)
	}
	// The body's last processes may take a moment to leave them. Any that
	// remain are the body's by construction (the cgroups are named for
	// its state directory), and outlived its PID 1 only because this is
	// a cleanup after a crash that lost or never wrote the record: they
	// go too.
	for try := 0; ; try++ {
		killCgroups(cgroups)
		err := removeCgroups(cgroups)
		if err == nil {
			break
		}
		if try == 20 || sleep(ctx, 250*time.Millisecond) != nil {
			errs = append(errs, err)
			break
		}
	}
	if err := unmountAll(ctx, stateDir); err != nil {
		errs = append(errs, err)
	}
	if stale, err := filepath.Glob(filepath.Join(stateDir, ".#"+upperDir+"*")); err == nil {
		for _, d := range stale {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.Remove(filepath.Join(stateDir, recordFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func readRecord(stateDir string) (record, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, recordFile))
	if err != nil {
		return record{}, err
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return record{}, fmt.Errorf("%s: %w", filepath.Join(stateDir, recordFile), err)
	}
	return rec, nil
}

func writeRecord(stateDir string, rec record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(stateDir, recordFile), append(data, '\n'), 0o600)
}

// Console returns the path of the body's console log.
func (b *Body) Console() string { return filepath.Join(b.StateDir, consoleFile) }

// Path is where the body's path p (absolute) is seen from the machine:
// through its PID 1's root, so a file the body wrote is read as the body
// sees it, in its overlay.
func (b *Body) Path(p string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", b.Init.PID), p)
}

// consoleTail returns the last lines of a body's console, for errors.
func consoleTail(stateDir string) string {
	data, err := os.ReadFile(filepath.Join(stateDir, consoleFile))
	if err != nil {
		return "no console log: " + err.Error()
	}
	if len(data) > 2048 {
		data = data[len(data)-2048:]
	}
	return "console: …" + string(bytes.TrimSpace(data))
}

// Command returns a command that runs argv in the body: in its mount, UTS,
// IPC, network and PID namespaces, with the body's root. It is not
// confined to a unit, and it ends with the body.
func (b *Body) Command(ctx context.Context, argv ...string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command")
	}
	if !b.Init.Alive() {
		return nil, fmt.Errorf("body %s: not running", b.Name)
	}
	args := append([]string{"-t", fmt.Sprint(b.Init.PID), "-m", "-u", "-i", "-n", "-p", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = []string{bodyPath, "LANG=C.UTF-8", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	cmd.WaitDelay = 5 * time.Second
	return cmd, nil
}

// Output runs argv in the body and returns its standard output; an error
// carries its standard error.
func (b *Body) Output(ctx context.Context, argv ...string) ([]byte, error) {
	cmd, err := b.Command(ctx, argv...)
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("body %s: %s: %w: %s", b.Name, strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// WaitSettled waits until the body's boot has settled and returns
// systemd's state: "running" or "degraded", or "starting" when the only
// start jobs still running are those of the units named in pending. A
// Type=notify unit that waits for something outside the body (the agent
// waits for its controller) keeps systemd "starting" for as long.
func (b *Body) WaitSettled(ctx context.Context, pending ...string) (string, error) {
	var last, jobs string
	for {
		if !b.Running() {
			return last, fmt.Errorf("body %s: ended while booting: %s", b.Name, consoleTail(b.StateDir))
		}
		// is-system-running exits non-zero for every state but running.
		out, _ := b.Output(ctx, "systemctl", "is-system-running")
		last = strings.TrimSpace(string(out))
		switch last {
		case "running", "degraded":
			return last, nil
		// "offline" and "unknown" come before systemd answers on its bus.
		case "maintenance", "stopping":
			return last, fmt.Errorf("body %s: systemd is %s: %s", b.Name, last, consoleTail(b.StateDir))
		case "starting":
			out, err := b.Output(ctx, "systemctl", "list-jobs", "--no-legend", "--no-pager", "--plain")
			if err == nil && onlyRunning(out, pending) {
				return last, nil
			}
			jobs = strings.TrimSpace(string(out))
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return last, fmt.Errorf("body %s: waiting for its boot (systemd %q, jobs %q): %w", b.Name, last, jobs, err)
		}
	}
}

// onlyRunning reports whether every running job in `systemctl list-jobs`
// output ("ID UNIT TYPE STATE") is for a unit in units.
func onlyRunning(listJobs []byte, units []string) bool {
	allowed := make(map[string]bool, len(units))
	for _, u := range units {
		allowed[u] = true
	}
	sc := bufio.NewScanner(bytes.NewReader(listJobs))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		if f[3] == "running" && !allowed[f[1]] {
			return false
		}
	}
	return true
}
