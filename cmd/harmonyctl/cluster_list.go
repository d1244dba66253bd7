package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func clusterListCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List clusters with their phase and node counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			items, err := c.Clusters(cmd.Context())
			if err != nil {
				return err
			}
			list := v1.ClusterList{Items: items}
			return printOutput(output, list, func(w io.Writer) { printClusters(w, list.Items) })
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}

func printClusters(w io.Writer, items []v1.Cluster) {
	fmt.Fprintln(w, "NAME\tPROVIDER\tKUBERNETES\tMASTERS\tWORKERS\tVIP\tPHASE\tREADY\tAGE")
	for _, cl := range items {
		ready := "-"
		for _, c := range cl.Status.Conditions {
			if c.Type == v1.ConditionNodesReady {
				ready = c.Message
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", cl.Spec.Name, cl.Spec.Provider, cl.Spec.KubernetesVersion,
			*cl.Spec.Masters, cl.Spec.Workers, cl.Spec.VIP, cl.Status.Phase, ready, time.Since(cl.Status.CreatedAt).Round(time.Second))
	}
}

func clusterGetCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "get NAME",
		Short:             "Show a cluster: phase, conditions, nodes (with vCenter power and IPs, agent reports) and events",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.complete(clusterNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			cl, err := c.Cluster(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			grants, err := c.Grants(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOutput(output, cl, func(w io.Writer) {
				printClusters(w, []v1.Cluster{*cl})
				fmt.Fprintln(w)
				printGrants(w, grants)
				fmt.Fprintln(w)
				fmt.Fprintln(w, "CONDITION\tSTATUS\tREASON\tMESSAGE")
				for _, c := range cl.Status.Conditions {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
				}
				if u := cl.Status.Upgrade; u != nil {
					fmt.Fprintln(w)
					fmt.Fprintln(w, "UPGRADE\tFROM\tSTATE\tNODES DONE\tSTARTED\tMESSAGE")
					fmt.Fprintf(w, "%s (Kubernetes %s)\t%s (Kubernetes %s)\t%s\t%d of %d\t%s\t%s\n", u.Image, u.KubernetesVersion,
						u.FromImage, u.FromKubernetesVersion, u.State, u.Upgraded, u.Nodes, u.StartedAt.Local().Format(time.DateTime), dash(u.Message))
				}
				fmt.Fprintln(w)
				printClusterNodes(w, cl.Status.Nodes, time.Now())
				if copies := cl.Status.EtcdSnapshotCopies; len(copies) > 0 {
					fmt.Fprintln(w)
					fmt.Fprintln(w, "ETCD SNAPSHOT ON THE CONTROLLER\tBYTES")
					for _, c := range copies {
						fmt.Fprintf(w, "%s\t%d\n", c.TakenAt.UTC().Format(time.RFC3339), c.Bytes)
					}
				}
				if r := cl.Status.EtcdSnapshotRequest; r != nil {
					fmt.Fprintln(w)
					fmt.Fprintf(w, "ETCD SNAPSHOT ASKED:\t%s by %s: %s\n", r.AskedAt.Local().Format(time.DateTime), r.By, snapshotAnswer(r))
				}
				fmt.Fprintln(w)
				fmt.Fprintln(w, "TIME\tTYPE\tREASON\tMESSAGE")
				for _, e := range cl.Status.Events {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.TimeOnly), e.Type, e.Reason, e.Message)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}

// snapshotAnswer says what became of a snapshot asked for by hand.
func snapshotAnswer(r *v1.EtcdSnapshotRequest) string {
	switch {
	case r.Error != "":
		return "failed: " + r.Error
	case r.FinishedAt.IsZero():
		return "the masters are taking it"
	case r.Copied:
		return fmt.Sprintf("%s took it at %s; the controller keeps a copy", r.Master, r.TakenAt.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s took it at %s; no copy on the controller", r.Master, r.TakenAt.UTC().Format(time.RFC3339))
}
