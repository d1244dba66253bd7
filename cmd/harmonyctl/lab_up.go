package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/internal/logging"
)

func labUpCommand() *cobra.Command {
	var cfg lab.Config
	var subnet string
	cmd := &cobra.Command{
		Use:   "up [--masters 3] [--workers 2] [--state DIR]",
		Short: "Build the network-namespace lab and print its JSON summary",
		Long: `Build the node-stack lab on this machine (root; Linux network namespaces):
a bridge, one namespace per host with an address in 198.18.0.0/15, a real
controller, and a real agent per host, enrolled through the bootstrap flow.
The agents run keepalived, HAProxy, etcd and kubeadm for real; there is no
kubelet, so each master's agent runs the kube-apiserver static pod as a
plain process instead. A real Prometheus scrapes every agent over mutual TLS.

It waits until every node is Ready and /readyz answers through the VIP,
then prints a JSON summary (hosts, vip, apiserver, kubeconfig, etcd,
controller, prometheus) on stdout; progress goes to stderr. A lab already
in --state is removed first. 'harmonyctl lab down' removes it all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, "text", "info")
			if err != nil {
				return err
			}
			cfg.Log = log
			if cfg.Subnet, err = netip.ParsePrefix(subnet); err != nil {
				return fmt.Errorf("--subnet: %w", err)
			}
			if cfg.BinDir == "" {
				if cfg.BinDir, err = ownDir(); err != nil {
					return err
				}
			}
			if cfg.KubernetesBinDir == "" {
				cfg.KubernetesBinDir = findKubernetesBin(cfg.BinDir)
			}
			sum, err := lab.Up(cmd.Context(), cfg)
			if sum != nil {
				if perr := printJSON(os.Stdout, sum); perr != nil && err == nil {
					err = perr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Masters, "masters", lab.DefaultMasters, "number of masters")
	f.IntVar(&cfg.Workers, "workers", lab.DefaultWorkers, "number of workers")
	f.StringVar(&cfg.StateDir, "state", "harmony-lab", "directory for the lab's state, logs and credentials")
	f.StringVar(&subnet, "subnet", lab.DefaultSubnet.String(), "the lab's /24, inside 198.18.0.0/15")
	f.StringVar(&cfg.BinDir, "bin-dir", "", "directory of harmony-agent and harmony-controller (default: this binary's)")
	f.StringVar(&cfg.KubernetesBinDir, "kubernetes-bin-dir", "", "directory of kubeadm and kube-apiserver (default $HARMONY_K8S_BIN, else what make kubernetes built)")
	f.DurationVar(&cfg.Timeout, "timeout", lab.DefaultTimeout, "how long to wait for the cluster to converge")
	return cmd
}

func labDownCommand() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "down [--state DIR]",
		Short: "Remove everything the lab in --state made",
		Long: `Stop the lab's processes and remove its network namespaces, link and files.
It works after a crash or an interrupted 'lab up', and does nothing when
there is no lab.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, "text", "info")
			if err != nil {
				return err
			}
			return lab.Down(cmd.Context(), stateDir, log)
		},
	}
	cmd.Flags().StringVar(&stateDir, "state", "harmony-lab", "the lab's state directory")
	return cmd
}

// ownDir is the directory of the running binary.
func ownDir() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find harmonyctl's own directory: %w", err)
	}
	return filepath.Dir(self), nil
}

// findKubernetesBin returns $HARMONY_K8S_BIN, else the newest build that
// make kubernetes left next to binDir (bin/../.cache/kubernetes/VERSION/bin).
func findKubernetesBin(binDir string) string {
	if dir := os.Getenv("HARMONY_K8S_BIN"); dir != "" {
		return dir
	}
	matches, _ := filepath.Glob(filepath.Join(binDir, "..", ".cache", "kubernetes", "*", "bin"))
	if len(matches) == 0 {
		return ""
	}
	sort.Strings(matches)
	return filepath.Clean(matches[len(matches)-1])
}
