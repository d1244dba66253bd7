package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/internal/logging"
)

func labUpCommand() *cobra.Command {
	var cfg lab.Config
	var subnet, output string
	var detach bool
	cmd := &cobra.Command{
		Use:   "up [--masters 3] [--workers 2] [--state DIR] [--detach]",
		Short: "Run Harmony on this machine: a simulated vCenter, the controller, and a cluster of VMs booted from the node image",
		Long: `Build the lab (root; Linux network namespaces and systemd-nspawn): govmomi's
vCenter simulator on 198.18.100.1:8989, a controller on :9443, and a real
Prometheus on :9090. Through the controller's normal API, as a user does
against a real vCenter, it applies a provider, imports the newest node OVA
from make images, creates a cluster of --masters and --workers, and issues
a kubeconfig. Every VM the controller powers on boots the node image
itself (its systemd, its units, its agent) in a body of its own.

A status table refreshes on stderr until the cluster is ready; then the
summary (where everything is) goes to stdout. Without --detach it stays up
until Ctrl-C and then tears everything down; with --detach it returns and
'harmonyctl lab down' removes the lab. A lab already in --state is removed
first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFlag(output, "text", "json"); err != nil {
				return err
			}
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
			table := newStatusTable(os.Stderr)
			cfg.Progress = table.show
			ctx := cmd.Context()
			sum, err := lab.Up(ctx, cfg)
			if ctx.Err() != nil && !detach {
				return tearDown(cfg.StateDir, log, err)
			}
			if err != nil {
				return fmt.Errorf("%w\nthe lab is left for its logs; 'harmonyctl lab down --state %s' removes it", err, cfg.StateDir)
			}
			if output == "json" {
				err = printJSON(os.Stdout, sum)
			} else {
				err = printSummary(os.Stdout, sum)
			}
			if err != nil || detach {
				return err
			}
			fmt.Fprintln(os.Stderr, "The lab runs until Ctrl-C.")
			<-ctx.Done()
			return tearDown(cfg.StateDir, log, nil)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Masters, "masters", lab.DefaultMasters, "number of masters (odd)")
	f.IntVar(&cfg.Workers, "workers", lab.DefaultWorkers, "number of workers")
	f.StringVar(&cfg.StateDir, "state", "harmony-lab", "directory for the lab's state, logs and credentials")
	f.StringVar(&subnet, "subnet", lab.DefaultSubnet.String(), "the lab's /24, inside 198.18.0.0/15")
	f.StringVar(&cfg.BinDir, "bin-dir", "", "directory of harmony-controller, harmonyctl and vmware-rpctool (default: this binary's)")
	f.StringVar(&cfg.OVA, "ova", "", "node image (default: the newest harmony-node-*.ova in --images-dir)")
	f.StringVar(&cfg.ImagesDir, "images-dir", "", "where make images puts the OVAs (default: BIN_DIR/../out/images)")
	f.StringVar(&cfg.KubernetesVersion, "kubernetes-version", "", "the cluster's Kubernetes version: n or n-1 of what the image carries (default n)")
	f.DurationVar(&cfg.Timeout, "timeout", lab.DefaultTimeout, "how long to wait for the cluster to be ready")
	f.BoolVar(&detach, "detach", false, "return once the cluster is ready and leave the lab running")
	f.StringVarP(&output, "output", "o", "text", "summary format: text or json")
	return cmd
}

// tearDown removes the lab after Ctrl-C, on a context of its own.
func tearDown(stateDir string, log interface{ Info(string, ...any) }, upErr error) error {
	fmt.Fprintln(os.Stderr, "Tearing the lab down.")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := lab.Down(ctx, stateDir, nil); err != nil {
		return fmt.Errorf("lab down: %w", err)
	}
	if upErr != nil && ctx.Err() == nil {
		log.Info("lab: interrupted", "err", upErr)
	}
	return nil
}

// statusTable shows the cluster while it builds: redrawn in place on a
// terminal, printed again on each change otherwise.
type statusTable struct {
	w     io.Writer
	tty   bool
	lines int
}

func newStatusTable(f *os.File) *statusTable {
	fi, err := f.Stat()
	return &statusTable{w: f, tty: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

func (t *statusTable) show(c *v1.Cluster, nodes []v1.Node) {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster %s: %s", c.Spec.Name, c.Status.Phase)
	for _, cond := range c.Status.Conditions {
		if cond.Type == v1.ConditionNodesReady || cond.Type == v1.ConditionKubernetesNodesReady {
			fmt.Fprintf(&b, " (%s)", cond.Message)
		}
	}
	b.WriteString("\n")
	agents := map[string]*v1.Status{}
	for i := range nodes {
		agents[nodes[i].Name] = nodes[i].Status
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tIP\tPHASE\tSTEP\tPOWER\tAGENT\tKUBERNETES\tNOT HEALTHY")
	for _, n := range c.Status.Nodes {
		var sick []string
		if st := agents[n.Name]; st != nil {
			for _, comp := range st.Components {
				if !comp.Healthy {
					sick = append(sick, comp.Name)
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Role, n.IP, n.Phase, dash(n.Step),
			dash(n.Power), dash(string(n.AgentPhase)), dash(n.Kubernetes), dash(strings.Join(sick, ",")))
	}
	tw.Flush()
	text := b.String()
	if t.tty && t.lines > 0 {
		fmt.Fprintf(t.w, "\x1b[%dA\x1b[J", t.lines)
	}
	fmt.Fprint(t.w, text)
	t.lines = strings.Count(text, "\n")
}

// printSummary says where everything is.
func printSummary(w io.Writer, s *lab.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Cluster %s is ready (image %s).\n\n", s.Cluster, s.Image)
	fmt.Fprintln(tw, "NODE\tROLE\tIP\tNETNS")
	for _, n := range s.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, n.Role, n.IP, n.Netns)
	}
	fmt.Fprintln(tw)
	for _, kv := range [][2]string{
		{"API server (VIP)", s.APIServer},
		{"kubeconfig", s.Kubeconfig},
		{"controller", s.Controller},
		{"harmonyctl config", s.AdminConfig},
		{"vCenter (vcsim)", s.VCenter},
		{"vCenter credentials", s.VCenterCredentials},
		{"Prometheus", s.Prometheus},
		{"state and logs", s.StateDir},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	fmt.Fprintf(tw, "\nTry:\n")
	fmt.Fprintf(tw, "  kubectl --kubeconfig %s get --raw /readyz\n", s.Kubeconfig)
	fmt.Fprintf(tw, "  harmonyctl --config %s cluster get %s\n", s.AdminConfig, s.Cluster)
	fmt.Fprintf(tw, "  harmonyctl lab vm off --state %s %s    # a master fails; the VIP moves\n", s.StateDir, firstMaster(s))
	return tw.Flush()
}

func firstMaster(s *lab.Summary) string {
	for _, n := range s.Nodes {
		if n.Role == string(v1.RoleMaster) {
			return n.Name
		}
	}
	return "NODE"
}

// ownDir is the directory of the running binary.
func ownDir() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find harmonyctl's own directory: %w", err)
	}
	return filepath.Dir(self), nil
}
