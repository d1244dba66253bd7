package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func auditCommand(g *globals) *cobra.Command {
	var output, since, cluster, user string
	cmd := &cobra.Command{
		Use:   "audit [--since 24h] [--cluster C] [--user U]",
		Short: "Show the audited requests: every change, login and enrollment (admins only)",
		Long: `Every request that changes something (logins and enrollments too, refused
ones included) is recorded with who, from where, what, when and the answer,
never with its body. The controller keeps 90 days in its store and appends
every entry to DATA_DIR/audit.log (JSON lines, 0600) for shipping.
Refusals of callers who have not signed in are kept within a budget per
source address (an IPv6 /64): 60 at once, then 60 a minute; an entry
after a gap says how many of its source's were left out ("+N left out").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			entries, err := c.Audit(cmd.Context(), since, cluster, user)
			if err != nil {
				return err
			}
			list := v1.AuditList{Items: entries}
			return printOutput(output, list, func(w io.Writer) {
				fmt.Fprintln(w, "TIME\tACTOR\tFROM\tREQUEST\tCLUSTER\tANSWER")
				for _, e := range list.Items {
					answer := fmt.Sprint(e.Status)
					if e.Code != "" {
						answer += " " + e.Code
					}
					if e.Suppressed > 0 {
						answer += fmt.Sprintf(" (+%d left out)", e.Suppressed)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s %s\t%s\t%s\n", e.Time.Local().Format(time.DateTime), e.Actor, e.Remote, e.Method, e.Path, dash(e.Cluster), answer)
				}
			})
		},
	}
	cmd.Flags().StringVar(&since, "since", "24h", "a duration back from now, or an RFC 3339 time")
	cmd.Flags().StringVar(&cluster, "cluster", "", "only requests on this cluster")
	cmd.Flags().StringVar(&user, "user", "", "only requests by (or, for a login, for) this user")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return cmd
}
