package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
)

// Exit codes beyond 0: 1 for errors, 2 for requests the controller
// refused, 3 for an operation that ran and failed.
const exitOperationFailed = 3

// operationFailedError is an operation that ended Failed.
type operationFailedError struct{ op v1.Operation }

func (e *operationFailedError) Error() string {
	return fmt.Sprintf("operation %s (%s %s) failed: %s", e.op.ID, e.op.Kind, e.op.Cluster+e.op.Image, e.op.Message)
}

// printOutput prints v as JSON or YAML, or calls table.
func printOutput(format string, v any, table func(w io.Writer)) error {
	switch format {
	case "json":
		return printJSON(os.Stdout, v)
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(data)
		return err
	case "table", "":
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		table(w)
		return w.Flush()
	}
	return fmt.Errorf("-o %q: want json, yaml or table", format)
}

// readDocument reads a YAML or JSON file ("-" for stdin) and returns it
// as JSON, for the controller's strict decoders.
func readDocument(file string) ([]byte, error) {
	var in io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	data, err := io.ReadAll(io.LimitReader(in, v1.MaxAdminBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > v1.MaxAdminBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", file, v1.MaxAdminBytes)
	}
	out, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return out, nil
}

// waitFlags are --wait and --timeout of a long operation.
type waitFlags struct {
	wait    bool
	timeout time.Duration
	output  string
}

// finish prints a started operation, or with --wait follows it to the end
// showing each event as it happens.
func (f waitFlags) finish(ctx context.Context, c *client.Client, op v1.Operation) error {
	if !f.wait {
		if f.output == "json" || f.output == "yaml" {
			return printOutput(f.output, op, nil)
		}
		fmt.Printf("operation %s started (%s %s); follow it with: harmonyctl operation get %s --watch\n", op.ID, op.Kind, op.Cluster+op.Image, op.ID)
		return nil
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	final, err := watchOperation(ctx, c, op.ID, os.Stderr)
	if err != nil {
		return err
	}
	if f.output == "json" || f.output == "yaml" {
		if err := printOutput(f.output, final, nil); err != nil {
			return err
		}
	} else if len(final.Nodes) > 0 {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		printClusterNodes(w, final.Nodes, time.Now())
		w.Flush()
	}
	if final.State == v1.OperationFailed {
		return &operationFailedError{op: final}
	}
	fmt.Fprintf(os.Stderr, "operation %s %s\n", final.ID, strings.ToLower(final.State))
	return nil
}

// watchOperation long-polls an operation, printing its events and
// progress until it ends.
func watchOperation(ctx context.Context, c *client.Client, id string, progress io.Writer) (v1.Operation, error) {
	var op v1.Operation
	started := time.Now()
	lastDone := -1
	for {
		watched, err := c.WatchOperation(ctx, id, op.Revision, 30*time.Second)
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return op, fmt.Errorf("gave up waiting for operation %s after %s; it goes on: harmonyctl operation get %s --watch", id, time.Since(started).Round(time.Second), id)
			}
			return op, err
		}
		next := *watched
		for _, e := range next.Events {
			if e.Seq > op.Revision || op.Revision == 0 {
				mark := " "
				if e.Type == "Warning" {
					mark = "!"
				}
				fmt.Fprintf(progress, "%s %6s  %-12s %s\n", mark, time.Since(started).Round(time.Second), e.Reason, e.Message)
			}
		}
		if next.Message != "" && next.Message != op.Message && !next.Done() {
			fmt.Fprintf(progress, "  %6s  %s\n", time.Since(started).Round(time.Second), next.Message)
		}
		if len(next.Nodes) > 0 {
			done := 0
			for _, n := range next.Nodes {
				if n.Step == "PoweredOn" || n.Phase == "Kept" {
					done++
				}
			}
			if !next.Done() && done != lastDone {
				fmt.Fprintf(progress, "  %6s  %d/%d nodes provisioned\n", time.Since(started).Round(time.Second), done, len(next.Nodes))
				lastDone = done
			}
		}
		op = next
		if op.Done() {
			return op, nil
		}
	}
}

func printClusterNodes(w io.Writer, nodes []v1.ClusterNode, now time.Time) {
	fmt.Fprintln(w, "NODE\tROLE\tIP\tPHASE\tSTEP\tVM\tPOWER\tAGENT\tREPORTED\tKUBERNETES\tETCD SNAPSHOT\tIMAGE\tREPLACEMENT\tLAST ERROR")
	for _, n := range nodes {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Role, n.IP, n.Phase, dash(n.Step), dash(n.VM),
			dash(n.Power), dash(n.AgentPhase), ago(n.LastReport, now), dash(strings.TrimSpace(n.Kubernetes+" "+n.KubeletVersion)), ago(n.EtcdSnapshotAt, now),
			dash(n.Image), dash(n.Upgrade), dash(n.LastError))
	}
}

// ago says how long before now t was, in its largest unit: "40s ago",
// "12m ago", "5h ago", "3d ago"; "-" for none.
func ago(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	d := max(now.Sub(*t), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func addWaitFlags(cmd *cobra.Command, f *waitFlags, waitDefault bool) {
	cmd.Flags().BoolVar(&f.wait, "wait", waitDefault, "follow the operation to its end, showing progress")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 0, "with --wait, stop waiting after this long (the operation goes on)")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "table, json or yaml")
}

// startOperation calls start, a typed client method that starts a long
// operation, then prints the operation or follows it as the wait flags say.
func (g *globals) startOperation(cmd *cobra.Command, wf waitFlags, start func(context.Context, *client.Client) (*v1.Operation, error)) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	op, err := start(cmd.Context(), c)
	if err != nil {
		return err
	}
	return wf.finish(cmd.Context(), c, *op)
}
