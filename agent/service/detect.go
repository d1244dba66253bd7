//go:build linux

package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// systemdBooted is sd_booted(3)'s test: systemd creates this directory
// early at boot, and nothing else does.
const systemdBooted = "/run/systemd/system"

// Detect picks the service manager for this host and returns it with the
// function that releases it (the units keep running). The caller logs
// which it got (Manager.Kind).
//
// On a host booted with systemd it connects to systemd and fails if it
// cannot, rather than fall back: the supervisor would start a second copy
// of every daemon that systemd already runs. Anywhere else (the lab,
// containers) it returns a supervisor built from cfg.
func Detect(ctx context.Context, cfg SupervisorConfig, log *slog.Logger) (Manager, func() error, error) {
	return detect(ctx, systemdBooted, SystemdConfig{}, cfg, log)
}

func detect(ctx context.Context, booted string, sdCfg SystemdConfig, cfg SupervisorConfig, log *slog.Logger) (Manager, func() error, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if info, err := os.Stat(booted); err == nil && info.IsDir() {
		if sdCfg.Logger == nil {
			sdCfg.Logger = log.With("manager", "systemd")
		}
		m, err := NewSystemd(ctx, sdCfg)
		if err != nil {
			return nil, nil, fmt.Errorf("the host runs systemd (%s exists), but: %w", booted, err)
		}
		return m, m.Close, nil
	}
	if cfg.Logger == nil {
		cfg.Logger = log.With("manager", "supervisor")
	}
	s, err := NewSupervisor(cfg)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// DetectInBackground is Detect, run in the background for at most
// timeout: the agent enrolls while it connects to systemd.
func DetectInBackground(cfg SupervisorConfig, log *slog.Logger, timeout time.Duration) *Pending {
	return NewPending(func(ctx context.Context) (Manager, func() error, error) {
		return Detect(ctx, cfg, log)
	}, timeout)
}
