// Command harmony-agent runs on every Harmony VM.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/agent"
	"github.com/harmonykaas/harmony/agent/bootstrap"
	"github.com/harmonykaas/harmony/agent/checks"
	"github.com/harmonykaas/harmony/agent/sdnotify"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/buildinfo"
)

func main() {
	var cfg agent.Config
	var logs logFlags
	var noGuestinfo bool
	cmd := &cobra.Command{
		Use:   "harmony-agent",
		Short: "The Harmony node agent: enrolls, watches its role, reports status",
		Long: `The Harmony node agent.

It reads its one-time bootstrap document from --bootstrap-file, else from
VMware guestinfo (guestinfo.harmony.bootstrap), else from the OVF
environment; enrolls with the controller over TLS; keeps its key and
certificate in --state-dir; renews the certificate at about two thirds of
its life; and watches its role over mutual TLS.`,
		Version:       buildinfo.Version,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log
			// First, before anything the agent runs can inherit
			// $NOTIFY_SOCKET.
			cfg.Notify = sdnotify.FromEnvironment(log)
			if !noGuestinfo {
				reader, how := bootstrap.DetectGuestinfo()
				cfg.Guestinfo = reader
				log.Info("guestinfo access", "via", how)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			log.Info("harmony-agent starting", "version", buildinfo.Version, "state_dir", cfg.StateDir)
			return a.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.BootstrapFile, "bootstrap-file", "", "bootstrap document file (JSON or base64 JSON); watched for replacement")
	f.StringVar(&cfg.OVFEnvFile, "ovf-env-file", "", "OVF environment file (ISO transport); guestinfo.ovfEnv is read otherwise")
	f.BoolVar(&noGuestinfo, "no-guestinfo", false, "do not read VMware guestinfo")
	f.StringVar(&cfg.StateDir, "state-dir", "/var/lib/harmony", "directory for the node key, certificate and cached role")
	f.StringSliceVar(&cfg.Addresses, "address", nil, "IP address for the node certificate (repeatable; default: the primary interface's)")
	f.DurationVar(&cfg.AddressWait, "address-wait", 0, "how long enrollment waits for the primary interface's address when --address is not given (default 2m)")
	f.StringSliceVar(&cfg.DNSNames, "dns-name", nil, "extra DNS name for the node certificate (repeatable; must be in the node's inventory)")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", ":"+strconv.Itoa(v1.AgentMetricsPort), "mutual-TLS /metrics listener; empty disables it")
	f.StringVar(&cfg.MetricsLocalListen, "metrics-local-listen", "", "optional plain-HTTP /metrics listener on loopback, e.g. 127.0.0.1:9102")
	f.BoolVar(&cfg.NodeStack, "node-stack", false, "act on the role: network, keepalived, HAProxy, etcd, kubeadm and the CNI")
	f.StringVar(&cfg.Root, "root", "/", "prefix for every path the node stack writes (a per-host directory in the lab)")
	f.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", 0, "node stack resync interval without a new role (default 30s)")
	f.StringVar(&cfg.KubeadmBinary, "kubeadm", "/usr/bin/kubeadm", "kubeadm binary")
	f.StringVar(&cfg.APIServerBinary, "kube-apiserver", "/usr/bin/kube-apiserver", "kube-apiserver binary, for --stand-in-for-kubelet")
	f.BoolVar(&cfg.StandInForKubelet, "stand-in-for-kubelet", false, "no kubelet on this host (tests only; VMs and the lab run the real kubelet): run the kube-apiserver static pod as a process")
	f.DurationVar(&cfg.WatchWait, "watch-wait", 0, "how long one role long poll waits (default 55s)")
	f.DurationVar(&cfg.RetryMax, "retry-max", 0, "longest wait between retries (default 1m)")
	f.DurationVar(&cfg.RefusedRetryMax, "refused-retry-max", 0, "longest wait between tries of a certificate the controller refused, e.g. after a restore from backup (default 5m)")
	logs.add(f)
	cmd.AddCommand(checkCommand())
	cmd.AddCommand(networkCommand(), dataDiskCommand())
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "harmony-agent:", err)
		os.Exit(1)
	}
}

// checkCommand holds the health checks daemons run, such as keepalived's
// track script. They print the reason of a failure and exit 1.
func checkCommand() *cobra.Command {
	check := &cobra.Command{Use: "check", Short: "Health checks run by the node's daemons"}
	var c checks.APIServer
	apiserver := &cobra.Command{
		Use:   "apiserver",
		Short: "Exit 0 if the local HAProxy and apiserver answer at L7 (keepalived's track script)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.Run(cmd.Context())
		},
	}
	f := apiserver.Flags()
	f.StringVar(&c.HAProxyURL, "haproxy-url", "http://127.0.0.1:8404/metrics", "local HAProxy metrics URL; empty skips it")
	f.StringVar(&c.ReadyzURL, "readyz-url", "https://127.0.0.1:6443/readyz", "local apiserver readiness URL; empty skips it")
	f.StringVar(&c.CAFile, "ca-file", "", "CA that verifies the apiserver")
	f.StringVar(&c.ServerName, "server-name", "", "name the apiserver's certificate must carry (default: the URL's host)")
	f.DurationVar(&c.Timeout, "timeout", 0, "overall timeout (default 2s)")
	check.AddCommand(apiserver)
	return check
}
