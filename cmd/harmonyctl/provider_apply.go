package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// passwordEnv supplies a provider's vCenter password when its file has
// none, so that the password need not sit in a file.
const passwordEnv = "HARMONY_VCENTER_PASSWORD"

func providerApplyCommand(g *globals) *cobra.Command {
	var file, output string
	cmd := &cobra.Command{
		Use:   "apply -f provider.yaml",
		Short: "Create or update a provider: a vCenter slice clusters are built in",
		Long: `Create or update a provider from a YAML or JSON file. The controller checks
that vCenter answers and knows the datacenter, compute cluster or resource
pool, folder, datastores and network before it stores anything.

The vCenter password is kept by the controller as a secret and never shown
again. Leave vcenter.password out of the file and set $` + passwordEnv + `
instead; on an update, leaving it out keeps the stored one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := readProvider(file)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			applied, err := c.ApplyProvider(cmd.Context(), p)
			if err != nil {
				return err
			}
			return printOutput(output, applied, func(w io.Writer) { printProviders(w, []v1.Provider{*applied}) })
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "provider document (YAML or JSON); - for stdin")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// readProvider reads and checks a provider document; a password left out
// of it comes from $HARMONY_VCENTER_PASSWORD.
func readProvider(file string) (*v1.Provider, error) {
	data, err := readDocument(file)
	if err != nil {
		return nil, err
	}
	p, err := v1.DecodeProvider(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if p.VCenter.Password == "" {
		p.VCenter.Password = os.Getenv(passwordEnv)
	}
	return p, nil
}

func printProviders(w io.Writer, ps []v1.Provider) {
	fmt.Fprintln(w, "NAME\tVCENTER\tDATACENTER\tCOMPUTE\tFOLDER\tDATASTORES (OS/DATA)\tNETWORK\tIP POOL")
	for _, p := range ps {
		compute := p.ComputeCluster
		if p.ResourcePool != "" {
			compute = p.ResourcePool
		}
		pool := "-"
		if p.IPPool != nil {
			ranges, _ := json.Marshal(p.IPPool.Ranges)
			pool = p.IPPool.Network + " " + string(ranges)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v/%v\t%s\t%s\n", p.Name, p.VCenter.URL, p.Datacenter, compute, p.Folder,
			p.Datastores.OS, p.DataDatastores(), p.Network, pool)
	}
}
