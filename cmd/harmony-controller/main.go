// Command harmony-controller runs the Harmony controller.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/cluster"
	"github.com/harmonykaas/harmony/internal/buildinfo"
	"github.com/harmonykaas/harmony/internal/logging"
)

func main() {
	root := &cobra.Command{
		Use:           "harmony-controller",
		Short:         "The Harmony controller: CA, node enrollment, roles and the admin API",
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCommand(), backupCommand(), restoreCommand(), adminConfigCommand(), initAdminCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "harmony-controller:", err)
		os.Exit(1)
	}
}

const defaultDataDir = "/var/lib/harmony-controller"

func serveCommand() *cobra.Command {
	var cfg controller.Config
	var logFormat, logLevel string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the controller API over TLS",
		Long: `Serve the controller API over TLS.

On first start it creates the data directory, the state store, a
self-signed ECDSA P-256 CA (or imports --ca-cert/--ca-key), and
DIR/admin.conf, the admin client configuration that harmonyctl reads (mode
0600).

It refuses to start on a store that is empty, truncated or damaged, or
missing beside an existing CA, naming the file: restore it with
harmony-controller restore. It never starts an empty store beside a CA.

Every API but enrollment requires a client certificate from the CA.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(os.Stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = log
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := controller.New(cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			return c.Serve(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", defaultDataDir, "directory for the CA, the store and admin.conf")
	f.StringVar(&cfg.Listen, "listen", controller.DefaultListen, "TLS listen address")
	f.StringSliceVar(&cfg.AdvertiseURLs, "advertise-url", nil, "controller URL written into bootstrap documents (repeatable; default from --listen)")
	f.StringSliceVar(&cfg.ExtraSANs, "san", nil, "extra DNS name or IP for the serving certificate (repeatable)")
	f.DurationVar(&cfg.CertLifetime, "cert-lifetime", controller.DefaultCertLifetime, "lifetime of node certificates")
	f.DurationVar(&cfg.AdminCertLifetime, "admin-cert-lifetime", controller.DefaultAdminCertLifetime, "lifetime of admin certificates (harmonyctl cert renew-admin renews one)")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "", "optional plain-HTTP /metrics listener; loopback only")
	f.StringVar(&cfg.ImportCACert, "ca-cert", "", "on first start, import this CA certificate (PEM, may include its parents) instead of creating one")
	f.StringVar(&cfg.ImportCAKey, "ca-key", "", "the private key of --ca-cert")
	f.IntVar(&cfg.CloneParallelism, "clone-parallelism", cluster.DefaultCloneParallelism, "VMs the cluster workflows build or remove at once")
	f.DurationVar(&cfg.RetryBase, "retry-base", cluster.DefaultRetryBase, "first retry delay of a failed vCenter step (doubles per attempt)")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", cluster.DefaultMaxAttempts, "attempts of a vCenter step before its node is marked failed")
	f.DurationVar(&cfg.LeaveTimeout, "leave-timeout", cluster.DefaultLeaveTimeout, "how long a removed node has to leave its cluster before its VM is powered off anyway")
	f.DurationVar(&cfg.EtcdSnapshotTimeout, "etcd-snapshot-timeout", cluster.DefaultSnapshotTimeout, "how long a cluster's masters have to take and copy an etcd snapshot asked for by hand (harmonyctl cluster snapshot)")
	f.DurationVar(&cfg.UpgradeNodeTimeout, "upgrade-node-timeout", cluster.DefaultUpgradeNodeTimeout, "how long a VM that replaces another in an upgrade has to report Ready before the replacement is rolled back")
	f.StringVar(&logFormat, "log-format", "text", "text or json")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
