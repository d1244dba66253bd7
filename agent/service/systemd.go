//go:build linux

package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/harmonykaas/harmony/agent/files"
)

// SystemdConfig configures a Systemd manager. Zero fields take the
// defaults given on each.
type SystemdConfig struct {
	// Socket is systemd's private D-Bus socket, which only root may use;
	// default /run/systemd/private.
	Socket string
	// UnitDir receives harmony-<name>.service; default /etc/systemd/system.
	UnitDir string
	// EnvDir receives <name>.env, a unit's environment (mode 0600: it may
	// hold secrets, and Environment= lines would be readable by anyone
	// through `systemctl show`); default /etc/harmony/services.
	EnvDir string
	// RestartSec is how long systemd waits before restarting a unit that
	// exited; default 2s. systemd never gives up (StartLimitIntervalSec=0).
	RestartSec time.Duration
	// StopTimeout is how long systemd waits after SIGTERM before SIGKILL;
	// default 10s.
	StopTimeout time.Duration
	// JobTimeout bounds the wait for one start, stop, restart or reload
	// job; default 2m.
	JobTimeout time.Duration
	// Logger receives one record per change; nil discards.
	Logger *slog.Logger
	// Dial, when set, opens the connection to systemd instead of
	// connecting to Socket. systemd refuses a peer outside its PID
	// namespace, so tests that boot one in a namespace of its own connect
	// from a process inside it and hand the connection over.
	Dial func(ctx context.Context) (net.Conn, error)
}

// Defaults of SystemdConfig.
const (
	DefaultSystemdSocket = "/run/systemd/private"
	DefaultUnitDir       = "/etc/systemd/system"
	DefaultEnvDir        = "/etc/harmony/services"
)

// Systemd is a Manager for hosts booted with systemd: each Unit becomes
// harmony-<name>.service, written to UnitDir, enabled (so it starts at
// boot, before the agent) and run with Restart=always, driven over
// systemd's private D-Bus socket with go-systemd's client.
//
// Restarts reports systemd's NRestarts: restarts after a crash. Unlike
// the supervisor's count, systemd resets it when the agent restarts a
// unit for a changed definition. LastExit is known only between a
// crash and the restart: systemd forgets it when the next process runs.
type Systemd struct {
	cfg SystemdConfig
	log *slog.Logger

	// ops serializes the calls that change units, so that one's
	// daemon-reload never races another's file write.
	ops sync.Mutex

	connMu sync.Mutex
	conn   *sdbus.Conn
}

var _ Manager = (*Systemd)(nil)

// NewSystemd connects to systemd and checks that it answers.
func NewSystemd(ctx context.Context, cfg SystemdConfig) (*Systemd, error) {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSystemdSocket
	}
	if cfg.UnitDir == "" {
		cfg.UnitDir = DefaultUnitDir
	}
	if cfg.EnvDir == "" {
		cfg.EnvDir = DefaultEnvDir
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"RestartSec", &cfg.RestartSec, 2 * time.Second},
		{"StopTimeout", &cfg.StopTimeout, 10 * time.Second},
		{"JobTimeout", &cfg.JobTimeout, 2 * time.Minute},
	} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < 0:
			return nil, fmt.Errorf("systemd manager: %s %v is negative", d.name, *d.v)
		}
	}
	for name, p := range map[string]string{"Socket": cfg.Socket, "UnitDir": cfg.UnitDir, "EnvDir": cfg.EnvDir} {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("systemd manager: %s %q is not an absolute path", name, p)
		}
	}
	// EnvDir is written into unit files as it is.
	if !plainPath.MatchString(cfg.EnvDir) {
		return nil, fmt.Errorf("systemd manager: EnvDir %q: want only letters, digits and /._-", cfg.EnvDir)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Systemd{cfg: cfg, log: log}
	state, err := s.systemState(ctx)
	if err != nil {
		return nil, fmt.Errorf("systemd manager: %w", err)
	}
	log.Info("connected to systemd", "state", state, "socket", cfg.Socket)
	return s, nil
}

// Kind implements Manager.
func (s *Systemd) Kind() string { return "systemd" }

// Close drops the D-Bus connection; the units keep running.
func (s *Systemd) Close() error {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.conn == nil {
		return nil
	}
	s.conn.Close()
	s.conn = nil
	return nil
}

// UnitName is the systemd unit that runs the named Unit.
func UnitName(name string) string { return "harmony-" + name + ".service" }

// Ensure implements Manager: it writes the unit (and environment) files
// when they differ, reloads systemd's view of them, enables the unit, and
// restarts it if its definition changed or starts it if it is not
// running.
func (s *Systemd) Ensure(ctx context.Context, u Unit) (bool, error) {
	if err := validateUnit(u); err != nil {
		return false, fmt.Errorf("ensure %q: %w", u.Name, err)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	name := UnitName(u.Name)
	env, err := renderEnv(u.Env)
	if err != nil {
		return false, fmt.Errorf("ensure %s: %w", u.Name, err)
	}
	envChanged, err := s.writeEnv(u.Name, env)
	if err != nil {
		return false, fmt.Errorf("ensure %s: %w", u.Name, err)
	}
	text, err := renderUnit(u, s.cfg, env)
	if err != nil {
		return false, fmt.Errorf("ensure %s: %w", u.Name, err)
	}
	written, err := files.Write(s.unitPath(u.Name), text, 0o644, nil)
	if err != nil {
		return false, fmt.Errorf("ensure %s: %w", u.Name, err)
	}
	defChanged := written || envChanged

	c, p, err := s.load(ctx, name)
	if err != nil {
		return false, fmt.Errorf("ensure %s: %w", u.Name, err)
	}
	// systemd may hold an older definition even when the file did not
	// change now: an agent that died between writing it and reloading.
	if written || p.NeedDaemonReload || p.LoadState != "loaded" {
		if err := s.daemonReload(ctx, c); err != nil {
			return false, fmt.Errorf("ensure %s: %w", u.Name, err)
		}
		if p, err = s.properties(ctx, c, name); err != nil {
			return false, fmt.Errorf("ensure %s: %w", u.Name, err)
		}
		if p.LoadState != "loaded" {
			return false, fmt.Errorf("ensure %s: systemd did not load %s: %s", u.Name, s.unitPath(u.Name), p.LoadState)
		}
	}
	if p.UnitFileState != "enabled" {
		if _, _, err := c.EnableUnitFilesContext(ctx, []string{name}, false, true); err != nil {
			return false, fmt.Errorf("ensure %s: enable: %w", u.Name, err)
		}
		s.log.Info("enabled unit", "unit", name)
	}

	var kind string
	switch {
	case defChanged && unitActive(p):
		kind = restartUnit
	case !unitActive(p):
		// Also a unit waiting to be restarted after a crash: it starts
		// now, and reads its files afresh either way.
		kind = startUnit
		if p.ActiveState == "failed" {
			if err := c.ResetFailedUnitContext(ctx, name); err != nil {
				return false, fmt.Errorf("ensure %s: reset failed state: %w", u.Name, err)
			}
		}
	default:
		return false, nil
	}
	if err := s.job(ctx, c, kind, name); err != nil {
		return false, fmt.Errorf("ensure %s: %w", u.Name, err)
	}
	s.log.Info("unit (re)started", "unit", name, "definition_changed", defChanged, "was", p.ActiveState+"/"+p.SubState)
	return true, nil
}

// Reload implements Manager: systemd's reload (ExecReload signals the
// main process) for a unit with a reload signal, else a restart.
func (s *Systemd) Reload(ctx context.Context, name string) error {
	return s.act(ctx, name, func(c *sdbus.Conn, p unitProps) error {
		if !unitActive(p) {
			return fmt.Errorf("reload %s: not running (%s/%s)", name, p.ActiveState, p.SubState)
		}
		kind := restartUnit
		if p.CanReload {
			kind = reloadUnit
		}
		return s.job(ctx, c, kind, UnitName(name))
	})
}

// Restart implements Manager.
func (s *Systemd) Restart(ctx context.Context, name string) error {
	return s.act(ctx, name, func(c *sdbus.Conn, _ unitProps) error {
		return s.job(ctx, c, restartUnit, UnitName(name))
	})
}

// act runs f on a known unit, with ops held.
func (s *Systemd) act(ctx context.Context, name string, f func(*sdbus.Conn, unitProps) error) error {
	if !validName(name) {
		return fmt.Errorf("invalid unit name %q", name)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	c, p, err := s.load(ctx, UnitName(name))
	if err != nil {
		return err
	}
	if p.LoadState == "not-found" {
		return fmt.Errorf("%s: %w", name, ErrUnknownUnit)
	}
	return f(c, p)
}

// Stop implements Manager: stop, disable, and remove the unit's files.
func (s *Systemd) Stop(ctx context.Context, name string) error {
	if !validName(name) {
		return fmt.Errorf("invalid unit name %q", name)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	unit := UnitName(name)
	c, p, err := s.load(ctx, unit)
	if err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	_, statErr := os.Stat(s.unitPath(name))
	if p.LoadState == "not-found" && errors.Is(statErr, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", name, ErrUnknownUnit)
	}
	if p.ActiveState != "inactive" {
		if err := s.job(ctx, c, stopUnit, unit); err != nil {
			return fmt.Errorf("stop %s: %w", name, err)
		}
	}
	if _, err := c.DisableUnitFilesContext(ctx, []string{unit}, false); err != nil && !isNoSuchUnit(err) {
		return fmt.Errorf("stop %s: disable: %w", name, err)
	}
	for _, f := range []string{s.unitPath(name), s.envPath(name)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("stop %s: %w", name, err)
		}
	}
	if err := s.daemonReload(ctx, c); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	// A unit that failed stays listed until its failure is reset.
	if err := c.ResetFailedUnitContext(ctx, unit); err != nil && !isNoSuchUnit(err) {
		s.log.Debug("reset failed state", "unit", unit, "err", err)
	}
	s.log.Info("unit stopped and removed", "unit", unit)
	return nil
}

// State implements Manager.
func (s *Systemd) State(ctx context.Context, name string) (State, error) {
	if !validName(name) {
		return State{}, fmt.Errorf("invalid unit name %q", name)
	}
	_, p, err := s.load(ctx, UnitName(name))
	if err != nil {
		return State{}, fmt.Errorf("state of %s: %w", name, err)
	}
	if p.LoadState == "not-found" {
		return State{}, fmt.Errorf("%s: %w", name, ErrUnknownUnit)
	}
	st := State{Running: unitActive(p) && p.MainPID != 0, PID: int(p.MainPID), Restarts: int(p.NRestarts)}
	if p.ExecMainStartTimestamp != 0 {
		st.Started = time.UnixMicro(int64(p.ExecMainStartTimestamp))
	}
	if p.ExecMainExitTimestamp != 0 {
		st.LastExit = exitDescription(p.ExecMainCode, p.ExecMainStatus)
	}
	return st, nil
}

// exitDescription words an exit as os/exec does ("exit status 1",
// "signal: killed"), as the supervisor reports it. code is a CLD_* value.
func exitDescription(code, status int32) string {
	switch code {
	case 1: // CLD_EXITED
		return "exit status " + strconv.Itoa(int(status))
	case 2, 3: // CLD_KILLED, CLD_DUMPED
		return "signal: " + syscall.Signal(status).String()
	}
	return ""
}

func unitActive(p unitProps) bool {
	return p.ActiveState == "active" || p.ActiveState == "reloading"
}

func (s *Systemd) unitPath(name string) string {
	return filepath.Join(s.cfg.UnitDir, UnitName(name))
}

func (s *Systemd) envPath(name string) string {
	return filepath.Join(s.cfg.EnvDir, name+".env")
}

// writeEnv writes, or with no environment removes, the unit's
// environment file, and says whether that changed it.
func (s *Systemd) writeEnv(name string, env []byte) (bool, error) {
	path := s.envPath(name)
	if env == nil {
		err := os.Remove(path)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	if err := os.MkdirAll(s.cfg.EnvDir, 0o700); err != nil {
		return false, err
	}
	return files.Write(path, env, 0o600, nil)
}

// --- the unit file ---

// hardening applies to every unit. It keeps what none of the daemons the
// agent runs (keepalived, HAProxy, etcd, the Kubernetes control plane)
// needs out of their reach: no new privileges, a read-only /usr, /boot
// and /etc, no home directories, a private /tmp, no kernel modules, logs,
// clock or cgroup tree. /proc/sys stays writable: keepalived sets
// interface sysctls.
var hardening = []string{
	"NoNewPrivileges=yes",
	"ProtectSystem=full",
	"ProtectHome=yes",
	"PrivateTmp=yes",
	"ProtectKernelModules=yes",
	"ProtectKernelLogs=yes",
	"ProtectControlGroups=yes",
	"ProtectClock=yes",
	"RestrictSUIDSGID=yes",
	"RestrictRealtime=yes",
	"LockPersonality=yes",
	"SystemCallArchitectures=native",
}

// renderUnit returns the unit file of u. env is its environment file's
// content, or nil; its digest in the file makes an environment change a
// definition change.
func renderUnit(u Unit, cfg SystemdConfig, env []byte) ([]byte, error) {
	var b strings.Builder
	line := func(s ...string) {
		for _, x := range s {
			b.WriteString(x)
		}
		b.WriteByte('\n')
	}
	exec, err := execLine(u.Command)
	if err != nil {
		return nil, err
	}
	line("# Written by harmony-agent for its unit ", strconv.Quote(u.Name), ". Local edits are replaced.")
	line("[Unit]")
	line("Description=Harmony ", u.Name)
	line("Documentation=https://github.com/harmonykaas/harmony")
	line("Wants=network-online.target")
	line("After=network-online.target")
	line("# The agent expects its daemons back however often they fail.")
	line("StartLimitIntervalSec=0")
	line()
	line("[Service]")
	line("Type=simple")
	line("ExecStart=", exec)
	if u.ReloadSignal != 0 {
		// The shell's kill, not /bin/kill: procps is not in the images,
		// and systemd 252 (bookworm) has no ReloadSignal=. "$$" is a
		// literal "$": the shell reads MAINPID, which systemd sets for
		// ExecReload.
		line("ExecReload=/bin/sh -c \"kill -", signalName(u.ReloadSignal), " $$MAINPID\"")
	}
	if env != nil {
		sum := sha256.Sum256(env)
		line("# Environment sha256 ", hex.EncodeToString(sum[:]))
		// A plain path: EnvironmentFile= takes no quotes (NewSystemd
		// checked EnvDir needs none).
		line("EnvironmentFile=", filepath.Join(cfg.EnvDir, u.Name+".env"))
	}
	line("Restart=always")
	line("RestartSec=", seconds(cfg.RestartSec))
	line("TimeoutStopSec=", seconds(cfg.StopTimeout))
	line("KillMode=control-group")
	for _, h := range hardening {
		line(h)
	}
	line()
	line("[Install]")
	line("WantedBy=multi-user.target")
	return []byte(b.String()), nil
}

// seconds writes a duration as systemd reads it, in milliseconds.
func seconds(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return strconv.Itoa(int(sig))
}

// execLine quotes an argv for ExecStart=, so that systemd passes each
// argument through unchanged.
func execLine(argv []string) (string, error) {
	words := make([]string, len(argv))
	for i, a := range argv {
		q, err := quoteArg(a)
		if err != nil {
			return "", fmt.Errorf("command argument %d: %w", i, err)
		}
		words[i] = q
	}
	return strings.Join(words, " "), nil
}

// quoteArg quotes one word of a command line in a unit file. systemd
// splits the line into words at white space outside quotes, undoes C
// escapes, expands %-specifiers, and substitutes $VAR and ${VAR}; within
// double quotes, \" \\ \n \t and \xHH are escapes, %% is a literal % and
// $$ a literal $. Quoting every word also keeps a lone ";" from being
// read as a command separator.
func quoteArg(a string) (string, error) {
	if !utf8.ValidString(a) {
		return "", fmt.Errorf("%q is not valid UTF-8", a)
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range a {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '%':
			b.WriteString("%%")
		case r == '$':
			b.WriteString("$$")
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == 0:
			return "", fmt.Errorf("%q contains NUL", a)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

var plainPath = regexp.MustCompile(`^/[A-Za-z0-9/._-]*$`)

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// renderEnv returns the environment file for env, nil for none. Values
// are double-quoted, where systemd (like a shell) takes \" \\ \` and \$
// as escapes and keeps newlines.
func renderEnv(env []string) ([]byte, error) {
	if len(env) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString("# Written by harmony-agent. Local edits are replaced.\n")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !envKey.MatchString(k) {
			return nil, fmt.Errorf("environment variable name %q: want letters, digits and _, not starting with a digit", k)
		}
		if !utf8.ValidString(v) {
			return nil, fmt.Errorf("environment variable %s: value is not valid UTF-8", k)
		}
		b.WriteString(k)
		b.WriteString(`="`)
		for _, r := range v {
			if strings.ContainsRune("\"\\`$", r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteString("\"\n")
	}
	return []byte(b.String()), nil
}

// --- systemd over D-Bus ---

// bus returns a live connection, dialing again after systemd dropped the
// last one (daemon-reexec, a systemd upgrade).
func (s *Systemd) bus(ctx context.Context) (*sdbus.Conn, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.conn != nil && s.conn.Connected() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	// go-systemd dials twice: one connection for calls, one for the
	// JobRemoved signals that end the waits for jobs.
	c, err := sdbus.NewConnection(func() (*godbus.Conn, error) { return s.dial(ctx) })
	if err != nil {
		return nil, fmt.Errorf("connect to systemd at %s: %w", s.cfg.Socket, err)
	}
	s.conn = c
	return c, nil
}

// dial opens one authenticated connection to systemd's private socket.
// Not sdbus.NewSystemdConnectionContext: godbus closes a connection when
// the context it was made with ends, and this one outlives the call that
// made it; ctx bounds only the dial and the authentication. There is no
// Hello: the private socket is peer to peer, with no bus daemon.
func (s *Systemd) dial(ctx context.Context) (*godbus.Conn, error) {
	var nc net.Conn
	var err error
	if s.cfg.Dial != nil {
		nc, err = s.cfg.Dial(ctx)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "unix", s.cfg.Socket)
	}
	if err != nil {
		return nil, err
	}
	raw := nc
	if uc, ok := nc.(*net.UnixConn); ok {
		nc = &drainingConn{UnixConn: uc}
	}
	// A cancelled ctx ends the authentication, or the connection it made.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	c, err := godbus.NewConn(nc)
	if err == nil {
		err = c.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))})
	}
	if err != nil {
		stop()
		// godbus starts its reader only after authenticating, so none is
		// left to close the file.
		raw.Close()
		return nil, fmt.Errorf("authenticate: %w", err)
	}
	if !stop() {
		c.Close()
		return nil, ctx.Err()
	}
	return c, nil
}

// drainingConn closes by shutting the socket down, and closes the file
// only once the reader has seen the end of the stream. godbus v5.1.0
// panics when a read fails in the middle of a message, and systemd sends
// signals to every private connection at any time: closing the file under
// a reader that is midway through one would crash the agent. After the
// shutdown the reader still gets the rest of the message it is reading.
type drainingConn struct {
	*net.UnixConn
	closeOnce sync.Once
}

func (c *drainingConn) Read(b []byte) (int, error) {
	n, err := c.UnixConn.Read(b)
	if err != nil {
		c.closeOnce.Do(func() { c.UnixConn.Close() })
	}
	return n, err
}

func (c *drainingConn) Close() error {
	rerr := c.UnixConn.CloseRead()
	werr := c.UnixConn.CloseWrite()
	return errors.Join(rerr, werr)
}

// systemState asks systemd its state ("running", "degraded", ...), which
// also proves the connection works.
func (s *Systemd) systemState(ctx context.Context) (string, error) {
	c, err := s.bus(ctx)
	if err != nil {
		return "", err
	}
	p, err := c.SystemStateContext(ctx)
	if err != nil {
		return "", fmt.Errorf("ask systemd its state: %w", err)
	}
	state, _ := p.Value.Value().(string)
	return state, nil
}

func (s *Systemd) daemonReload(ctx context.Context, c *sdbus.Conn) error {
	// systemd answers once the reload is done.
	if err := c.ReloadContext(ctx); err != nil {
		return fmt.Errorf("daemon-reload: %w", err)
	}
	return nil
}

// unitProps are the properties the manager reads.
type unitProps struct {
	LoadState, ActiveState, SubState, UnitFileState string
	NeedDaemonReload, CanReload                     bool
	MainPID, NRestarts                              uint32
	ExecMainStartTimestamp, ExecMainExitTimestamp   uint64
	ExecMainCode, ExecMainStatus                    int32
}

// load reads a unit's properties. Asking for them makes systemd load the
// unit; one that has no file loads as "not-found".
func (s *Systemd) load(ctx context.Context, unit string) (*sdbus.Conn, unitProps, error) {
	c, err := s.bus(ctx)
	if err != nil {
		return nil, unitProps{}, err
	}
	p, err := s.properties(ctx, c, unit)
	return c, p, err
}

func (s *Systemd) properties(ctx context.Context, c *sdbus.Conn, unit string) (unitProps, error) {
	var p unitProps
	u, err := c.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return p, fmt.Errorf("properties of %s: %w", unit, err)
	}
	svc, err := c.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return p, fmt.Errorf("service properties of %s: %w", unit, err)
	}
	p.LoadState, _ = u["LoadState"].(string)
	p.ActiveState, _ = u["ActiveState"].(string)
	p.SubState, _ = u["SubState"].(string)
	p.UnitFileState, _ = u["UnitFileState"].(string)
	p.NeedDaemonReload, _ = u["NeedDaemonReload"].(bool)
	p.CanReload, _ = u["CanReload"].(bool)
	p.MainPID, _ = svc["MainPID"].(uint32)
	p.NRestarts, _ = svc["NRestarts"].(uint32)
	p.ExecMainStartTimestamp, _ = svc["ExecMainStartTimestamp"].(uint64)
	p.ExecMainExitTimestamp, _ = svc["ExecMainExitTimestamp"].(uint64)
	p.ExecMainCode, _ = svc["ExecMainCode"].(int32)
	p.ExecMainStatus, _ = svc["ExecMainStatus"].(int32)
	if p.LoadState == "" {
		return p, fmt.Errorf("properties of %s: no LoadState", unit)
	}
	return p, nil
}

// Job kinds, named as systemd's methods are.
const (
	startUnit   = "StartUnit"
	stopUnit    = "StopUnit"
	restartUnit = "RestartUnit"
	reloadUnit  = "ReloadUnit"
)

// job asks systemd to start, stop, restart or reload unit, replacing any
// job queued for it, and waits until the job is done; then it checks the
// unit did not fail.
func (s *Systemd) job(ctx context.Context, c *sdbus.Conn, kind, unit string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.JobTimeout)
	defer cancel()
	queue := map[string]func(context.Context, string, string, chan<- string) (int, error){
		startUnit:   c.StartUnitContext,
		stopUnit:    c.StopUnitContext,
		restartUnit: c.RestartUnitContext,
		reloadUnit:  c.ReloadUnitContext,
	}[kind]
	if queue == nil {
		return fmt.Errorf("%s %s: unknown job kind", kind, unit)
	}
	// Buffered: go-systemd sends the result while holding its lock on all
	// jobs, and nobody reads it if ctx ends first.
	done := make(chan string, 1)
	id, err := queue(ctx, unit, "replace", done)
	if err != nil {
		if isNoSuchUnit(err) {
			return fmt.Errorf("%s %s: %w", kind, unit, ErrUnknownUnit)
		}
		return fmt.Errorf("%s %s: %w", kind, unit, err)
	}
	select {
	case result := <-done:
		// "canceled", "timeout", "failed", "dependency" or "skipped".
		if result != "done" {
			return fmt.Errorf("%s %s: job %d ended %q", kind, unit, id, result)
		}
	case <-ctx.Done():
		return fmt.Errorf("%s %s: job %d not done: %w", kind, unit, id, ctx.Err())
	}
	if kind == stopUnit {
		return nil
	}
	p, err := s.properties(ctx, c, unit)
	if err != nil {
		return err
	}
	if p.ActiveState == "failed" {
		return fmt.Errorf("%s %s: unit failed (%s)", kind, unit, p.SubState)
	}
	return nil
}

// isNoSuchUnit tells systemd's answer for a unit it does not know.
func isNoSuchUnit(err error) bool {
	var name string
	var e godbus.Error
	var pe *godbus.Error
	switch {
	case errors.As(err, &e):
		name = e.Name
	case errors.As(err, &pe):
		name = pe.Name
	}
	return name == "org.freedesktop.systemd1.NoSuchUnit" || name == "org.freedesktop.systemd1.UnitNotFound"
}
