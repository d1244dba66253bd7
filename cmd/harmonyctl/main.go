// Command harmonyctl is the Harmony admin CLI. Each command lives in its
// own file.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/internal/buildinfo"
)

// globals are the flags every command shares.
type globals struct {
	config string
	server string
}

func main() {
	g := &globals{}
	root := &cobra.Command{
		Use:   "harmonyctl",
		Short: "Drive a Harmony controller",
		Long: `harmonyctl drives a Harmony controller with the credential of a client
config: --config, else $HARMONY_CONFIG, else ~/.harmony/config. It holds a
user's session (harmonyctl login), or an admin certificate: the controller
writes one to DATA_DIR/admin.conf on first start, the break-glass
credential.`,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.config, "config", "", "client config file (default $HARMONY_CONFIG or ~/.harmony/config)")
	root.PersistentFlags().StringVar(&g.server, "server", "", "controller URL, overriding the config's")

	node := &cobra.Command{Use: "node", Short: "Manage node records, bootstrap tokens and roles"}
	node.AddCommand(nodeAddCommand(g), nodeListCommand(g), nodeGetCommand(g), nodeDeleteCommand(g),
		nodeTokenCommand(g), nodeRoleCommand(g), nodeSetRoleCommand(g))
	cert := &cobra.Command{Use: "cert", Short: "Issue client certificates"}
	cert.AddCommand(certScraperCommand(g), certListCommand(g), certRevokeCommand(g), certRenewAdminCommand(g))
	labCmd := &cobra.Command{Use: "lab", Short: "Run Harmony on this machine: a simulated vCenter, the controller and VMs booted from the node image"}
	labCmd.AddCommand(labUpCommand(), labDownCommand(), labServeCommand(), labVMCommand(), labLoadImageCommand(), labImportImageCommand())
	ovaCmd := &cobra.Command{Use: "ova", Short: "Inspect and validate OVA files"}
	ovaCmd.AddCommand(ovaInspectCommand(), ovaValidateCommand())
	provider := &cobra.Command{Use: "provider", Short: "Manage providers: the vCenter slices clusters are built in"}
	provider.AddCommand(providerApplyCommand(g), providerListCommand(g), providerGetCommand(g), providerDeleteCommand(g))
	image := &cobra.Command{Use: "image", Short: "Import golden OVAs into providers as templates"}
	image.AddCommand(imageImportCommand(g), imageListCommand(g))
	cluster := &cobra.Command{Use: "cluster", Short: "Create, scale, upgrade, inspect and delete Kubernetes clusters"}
	cluster.AddCommand(clusterCreateCommand(g), clusterListCommand(g), clusterGetCommand(g), clusterScaleCommand(g),
		clusterUpgradeCommand(g), clusterRestoreCommand(g), clusterSnapshotCommand(g), clusterDeleteCommand(g), clusterRemoveNodeCommand(g), clusterReplaceNodeCommand(g), clusterRetryCommand(g), clusterKubeconfigCommand(g),
		clusterGrantCommand(g), clusterRevokeCommand(g), clusterRevokeSessionsCommand(g))
	leftovers := &cobra.Command{Use: "leftovers", Short: "List and purge what clusters deleted without --purge left: data disks and etcd snapshot copies"}
	leftovers.AddCommand(clusterLeftoversListCommand(g), clusterLeftoversPurgeCommand(g))
	cluster.AddCommand(leftovers)
	user := &cobra.Command{Use: "user", Short: "Manage users: local ones, and the directory users who signed in (admins only)"}
	user.AddCommand(userAddCommand(g), userListCommand(g), userDeleteCommand(g), userPasswdCommand(g),
		userDisableCommand(g, true), userDisableCommand(g, false), userEndSessionsCommand(g))
	ldapCmd := &cobra.Command{Use: "ldap", Short: "Let LDAP or Active Directory users sign in (admins only)"}
	ldapCmd.AddCommand(ldapApplyCommand(g), ldapGetCommand(g), ldapDeleteCommand(g), ldapLookupCommand(g))
	appliance := &cobra.Command{Use: "appliance", Short: "Upgrade the control-plane appliance by reimage, in vCenter directly, and roll it back"}
	appliance.AddCommand(applianceUpgradeCommand(g), applianceRollbackCommand(g))
	operation := &cobra.Command{Use: "operation", Short: "Follow long-running operations"}
	operation.AddCommand(operationGetCommand(g))
	root.AddCommand(node, cert, labCmd, ovaCmd, provider, image, cluster, appliance, operation, user, ldapCmd,
		loginCommand(g), logoutCommand(g), whoamiCommand(g), setupCommand(g), credentialCommand(g), auditCommand(g))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			os.Exit(2)
		}
		var opErr *operationFailedError
		if errors.As(err, &opErr) {
			os.Exit(exitOperationFailed)
		}
		os.Exit(1)
	}
}

// connection is a client with the config it was made from.
type connection struct {
	*client.Client
	config *clientconfig.Config
	// path is the config's file.
	path string
	// server is the controller's URL: --server, else the config's.
	server string
}

func (g *globals) connect() (*connection, error) {
	path, err := clientconfig.Find(g.config)
	if err != nil {
		return nil, err
	}
	cfg, err := clientconfig.Load(path)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, g.server)
	if err != nil {
		return nil, err
	}
	// A refreshed session goes back into the config, for the next command.
	c.OnSessionRefresh(func(s *clientconfig.Session) error {
		cfg.Session = s
		return cfg.Write(path)
	})
	return &connection{Client: c, config: cfg, path: path, server: cmp.Or(g.server, cfg.Server)}, nil
}

func (g *globals) client() (*client.Client, error) {
	conn, err := g.connect()
	if err != nil {
		return nil, err
	}
	return conn.Client, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// outputFlag validates -o.
func outputFlag(value string, allowed ...string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return fmt.Errorf("-o %q: want one of %v", value, allowed)
}
