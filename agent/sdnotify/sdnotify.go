// Package sdnotify tells systemd how the agent is doing, by the sd_notify
// protocol (one datagram of KEY=VALUE lines to $NOTIFY_SOCKET): READY=1
// once the agent is enrolled and its node stack has made its first pass
// (the unit is Type=notify), STATUS= lines for `systemctl status`, and
// WATCHDOG=1 keep-alives while the agent's loops make progress. Outside
// systemd every call does nothing.
package sdnotify

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config says where to notify. The zero Config notifies nothing.
type Config struct {
	// Socket is the notification socket: a path, or "@name" for an
	// abstract socket. Empty disables notification.
	Socket string
	// WatchdogInterval is systemd's WatchdogSec; zero disables the
	// watchdog. Keep-alives go out at half of it.
	WatchdogInterval time.Duration
	// Logger receives failures to notify; nil discards them.
	Logger *slog.Logger
}

// Notifier sends notifications. It is safe for concurrent use.
type Notifier struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	ready bool
}

// Environment variables systemd sets for a Type=notify service.
const (
	envSocket       = "NOTIFY_SOCKET"
	envWatchdogUSec = "WATCHDOG_USEC"
	envWatchdogPID  = "WATCHDOG_PID"
)

// FromEnvironment reads what systemd passed the agent and then removes it
// from the environment, so that the programs the agent runs (kubeadm,
// etcd under the supervisor) cannot notify in the agent's name: etcd, for
// one, sends READY=1 when it finds $NOTIFY_SOCKET.
func FromEnvironment(log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := Config{Socket: os.Getenv(envSocket), Logger: log}
	usec, pid := os.Getenv(envWatchdogUSec), os.Getenv(envWatchdogPID)
	for _, k := range []string{envSocket, envWatchdogUSec, envWatchdogPID} {
		os.Unsetenv(k)
	}
	if cfg.Socket != "" && !strings.HasPrefix(cfg.Socket, "/") && !strings.HasPrefix(cfg.Socket, "@") {
		log.Warn("ignoring a notification socket that is neither a path nor abstract", "NOTIFY_SOCKET", cfg.Socket)
		cfg.Socket = ""
	}
	if usec != "" {
		interval, err := watchdogInterval(usec, pid, os.Getpid())
		if err != nil {
			log.Warn("systemd watchdog not used", "err", err)
		}
		cfg.WatchdogInterval = interval
	}
	return New(cfg)
}

// watchdogInterval reads WATCHDOG_USEC, which applies to this process
// only if WATCHDOG_PID is unset or names it.
func watchdogInterval(usec, pid string, self int) (time.Duration, error) {
	if pid != "" {
		p, err := strconv.Atoi(pid)
		if err != nil {
			return 0, fmt.Errorf("%s=%q is not a PID", envWatchdogPID, pid)
		}
		if p != self {
			return 0, fmt.Errorf("%s=%d is another process (this is %d)", envWatchdogPID, p, self)
		}
	}
	n, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s=%q is not a positive number of microseconds", envWatchdogUSec, usec)
	}
	return time.Duration(n) * time.Microsecond, nil
}

// New returns a notifier for cfg.
func New(cfg Config) *Notifier {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Notifier{cfg: cfg, log: log}
}

// Enabled says whether systemd listens.
func (n *Notifier) Enabled() bool { return n.cfg.Socket != "" }

// WatchdogInterval is systemd's watchdog interval, zero when off.
func (n *Notifier) WatchdogInterval() time.Duration {
	if !n.Enabled() {
		return 0
	}
	return n.cfg.WatchdogInterval
}

// Ready tells systemd that start-up is done, with a status line. Only the
// first call sends READY=1; later ones send the status alone.
func (n *Notifier) Ready(status string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ready {
		return n.send("STATUS=" + oneLine(status))
	}
	if err := n.send("READY=1\nSTATUS=" + oneLine(status)); err != nil {
		return err
	}
	n.ready = true
	return nil
}

// Status sets the one-line status `systemctl status` shows.
func (n *Notifier) Status(status string) error {
	return n.send("STATUS=" + oneLine(status))
}

// Stopping tells systemd the agent is shutting down.
func (n *Notifier) Stopping() error {
	return n.send("STOPPING=1")
}

// Watchdog sends WATCHDOG=1 at half the watchdog interval until ctx is
// done, but only while alive (if not nil) returns nil: a stuck agent
// then stops the keep-alives and systemd restarts it. It returns at once
// when the watchdog is off.
func (n *Notifier) Watchdog(ctx context.Context, alive func() error) {
	interval := n.WatchdogInterval()
	if interval <= 0 {
		return
	}
	ticker := time.NewTicker(interval / 2)
	defer ticker.Stop()
	for {
		if alive != nil {
			if err := alive(); err != nil {
				n.log.Warn("withholding the watchdog keep-alive; systemd restarts the agent if this lasts", "err", err, "watchdog", interval)
			} else {
				n.ping()
			}
		} else {
			n.ping()
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (n *Notifier) ping() {
	if err := n.send("WATCHDOG=1"); err != nil {
		n.log.Warn("watchdog keep-alive", "err", err)
	}
}

// send writes one notification datagram.
func (n *Notifier) send(state string) error {
	if !n.Enabled() {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.cfg.Socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify systemd: %w", err)
	}
	defer conn.Close()
	if err := conn.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return fmt.Errorf("notify systemd: %w", err)
	}
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify systemd: %w", err)
	}
	return nil
}

// maxStatus bounds a status line; systemd shows one line anyway.
const maxStatus = 512

// oneLine keeps a status to one line: a newline would let its text set
// other variables (READY=1, MAINPID=...).
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxStatus {
		s = s[:maxStatus]
	}
	return strings.ToValidUTF8(s, "")
}
