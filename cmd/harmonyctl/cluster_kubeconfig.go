package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
)

func clusterKubeconfigCommand(g *globals) *cobra.Command {
	var out string
	var admin bool
	var lifetime time.Duration
	cmd := &cobra.Command{
		Use:   "kubeconfig NAME [-o FILE] [--admin [--lifetime 1h]]",
		Short: "Get a kubeconfig for a cluster's API on its VIP",
		Long: `Write a kubeconfig for the cluster. It holds no secret: kubectl runs
"harmonyctl credential NAME" for a certificate that lives 5 minutes and
names you and your grant on the cluster (view, edit or admin), which the
cluster's RBAC binds to the ClusterRole of that name (admin: cluster-admin).
Revoking the grant, disabling you or ending your sessions ends access
within those 5 minutes, with no CA rotated.

With --admin, a cluster admin gets instead a kubeconfig with its own key and
a certificate in group system:masters that expires after --lifetime (at most
168h); each one is recorded in the cluster's events.

It goes to standard output, or to -o FILE with mode 0600.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		PreRunE:           func(*cobra.Command, []string) error { return atomicfile.CheckOutput(out) },
		RunE: func(cmd *cobra.Command, args []string) error {
			conn, err := g.connect()
			if err != nil {
				return err
			}
			var data []byte
			var summary string
			if admin {
				kc, err := conn.Kubeconfig(cmd.Context(), args[0], lifetime)
				if err != nil {
					return err
				}
				data = []byte(kc.Kubeconfig)
				summary = fmt.Sprintf("%s at %s, valid until %s", kc.User, kc.Server, kc.ExpiresAt.Local().Format(time.RFC1123))
			} else {
				if data, summary, err = execKubeconfig(cmd, conn, g.server, args[0]); err != nil {
					return err
				}
			}
			if err := atomicfile.WriteOutput(out, nil, data, 0o600); err != nil {
				return err
			}
			if out != atomicfile.Stdout {
				fmt.Fprintf(os.Stderr, "wrote %s: %s\n", out, summary)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", atomicfile.Stdout, "file to write the kubeconfig to (0600), or - for standard output")
	cmd.Flags().BoolVar(&admin, "admin", false, "a cluster-admin kubeconfig with its own certificate (cluster admins only)")
	cmd.Flags().DurationVar(&lifetime, "lifetime", v1.DefaultKubeconfigLifetime, "with --admin: how long the certificate is valid")
	return cmd
}

// execKubeconfig is a kubeconfig whose credential comes from this very
// harmonyctl with this client config (and --server, when one was given).
// Its server and CA come from a first credential, which also checks the
// grant and fills the cache.
func execKubeconfig(cmd *cobra.Command, conn *connection, serverFlag, cluster string) ([]byte, string, error) {
	self, err := pluginCommand()
	if err != nil {
		return nil, "", err
	}
	config, err := configArgs(conn.path)
	if err != nil {
		return nil, "", err
	}
	pluginArgs := append(v1.CredentialArgs(cluster), config...)
	if serverFlag != "" {
		pluginArgs = append(pluginArgs, "--server", serverFlag)
	}
	cred, err := clusterCredential(cmd.Context(), conn, cluster)
	if err != nil {
		return nil, "", err
	}
	data, err := kubeconfig.NewExec(cluster, cred.Credential.Server, []byte(cred.Credential.CertificateAuthority),
		cred.Credential.User, self, pluginArgs).Marshal()
	return data, fmt.Sprintf("%s at %s, credentials from %s %s", cred.Credential.User, cred.Credential.Server, self, pluginArgs[0]), err
}

// pluginCommand names this harmonyctl in a kubeconfig: by its bare name
// when that is what PATH finds, so that the file also works for someone
// else, or on another machine, with harmonyctl installed; else by its
// absolute path.
func pluginCommand() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find harmonyctl's own path for the kubeconfig: %w", err)
	}
	found, err := exec.LookPath(v1.CredentialCommand)
	if err != nil {
		return self, nil
	}
	a, errA := os.Stat(found)
	b, errB := os.Stat(self)
	if errA == nil && errB == nil && os.SameFile(a, b) {
		return v1.CredentialCommand, nil
	}
	return self, nil
}

// configArgs name the client config for the plugin: nothing when it is
// the default one in the home directory, else --config with its absolute
// path.
func configArgs(path string) ([]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if def, err := clientconfig.DefaultPath(); err == nil && abs == def {
		return nil, nil
	}
	return []string{"--config", abs}, nil
}
