package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/harmonykaas/harmony/agent/reconcile"
)

// kubeadm runs kubeadm with args on the node. When the host's root is not
// "/" (the lab), kubeadm's --rootfs makes it chroot there first (it is a
// static binary, so it runs after the chroot): kubeadm hard-codes
// /etc/kubernetes, and every path in args and the configs is as seen from
// inside the root. secret is redacted from any output reported.
func (c *Component) kubeadm(ctx context.Context, host *reconcile.Host, secret string, args ...string) (string, error) {
	argv, err := c.argv(host, args)
	if err != nil {
		return "", err
	}
	return c.run(ctx, argv, secret)
}

// kubeadmUnconfined runs kubeadm like kubeadm does, but through
// Config.Unconfined: outside the agent's sandbox.
func (c *Component) kubeadmUnconfined(ctx context.Context, host *reconcile.Host, args ...string) (string, error) {
	argv, err := c.argv(host, args)
	if err != nil {
		return "", err
	}
	name := commandName(argv)
	if c.cfg.Unconfined != nil {
		argv = c.cfg.Unconfined(argv, c.cfg.CommandTimeout)
	}
	return c.runNamed(ctx, name, argv, "")
}

func (c *Component) argv(host *reconcile.Host, args []string) ([]string, error) {
	argv := []string{c.cfg.Binary}
	root, err := filepath.Abs(host.Root)
	if err != nil {
		return nil, fmt.Errorf("host root %q: %w", host.Root, err)
	}
	if root != "/" {
		argv = append(argv, "--rootfs", root)
	}
	return append(argv, args...), nil
}

// systemctl runs systemctl verb on a unit that is not the agent's own
// (the kubelet's), as kubeadm itself does.
func (c *Component) systemctl(ctx context.Context, verb, unit string) error {
	_, err := c.runNamed(ctx, "systemctl "+verb+" "+unit, []string{c.cfg.Systemctl, verb, unit}, "")
	return err
}

// run runs one kubeadm command with a minimal environment, bounded by
// CommandTimeout. Its error names the command (never a secret: those are
// only in the config files) and keeps kubeadm's own error lines.
func (c *Component) run(ctx context.Context, argv []string, secret string) (string, error) {
	return c.runNamed(ctx, commandName(argv), argv, secret)
}

// runNamed is run, its errors naming the command name.
func (c *Component) runNamed(ctx context.Context, name string, argv []string, secret string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CommandTimeout)
	defer cancel()
	cmd := c.cfg.Command(ctx, argv)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	if err == nil {
		return string(out), nil
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s: %w (after %s)", name, ctx.Err(), c.cfg.CommandTimeout)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return "", fmt.Errorf("%s: %s", name, outputMessage(string(out), secret))
}

// commandName is "kubeadm init phase certs all", without the binary's
// path, --rootfs and flag values.
func commandName(argv []string) string {
	words := []string{"kubeadm"}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if a == "--rootfs" || a == "--config" || a == "--kubeconfig" {
			i++
			continue
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

// outputMessage keeps what kubeadm says went wrong: its error lines
// (klog's "E1122 ..." and "error: ..."), else the last lines, without the
// stack-trace hint, with secret (the bootstrap token) and its secret half
// redacted, and bounded.
func outputMessage(out, secret string) string {
	var errs, all []string
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "To see the stack trace") {
			continue
		}
		all = append(all, line)
		if strings.HasPrefix(line, "error") || strings.HasPrefix(line, "[ERROR") || (len(line) > 1 && line[0] == 'E' && line[1] >= '0' && line[1] <= '9') {
			errs = append(errs, line)
		}
	}
	if len(errs) == 0 {
		errs = all[max(0, len(all)-3):]
	}
	msg := strings.Join(errs, "; ")
	if msg == "" {
		msg = "failed without a message"
	}
	if secret != "" {
		msg = strings.ReplaceAll(msg, secret, "REDACTED")
		if _, half, ok := strings.Cut(secret, "."); ok && half != "" {
			msg = strings.ReplaceAll(msg, half, "REDACTED")
		}
	}
	const limit = 1024
	if len(msg) > limit {
		msg = msg[:limit] + "…"
	}
	return msg
}

func logger(host *reconcile.Host) *slog.Logger {
	if host.Log != nil {
		return host.Log.With("component", Name)
	}
	return slog.New(slog.DiscardHandler)
}
