package main

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// cluster get shows how old each master's newest etcd snapshot is and
// how long ago each agent last reported, and a dash for none.
func TestClusterNodesShowTheEtcdSnapshotsAndReportsAge(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	nodes := []v1.ClusterNode{
		{Name: "c1-m1", Role: v1.RoleMaster, Phase: "Ready", EtcdSnapshotAt: at(3*time.Hour + 59*time.Minute), LastReport: at(time.Minute)},
		{Name: "c1-m2", Role: v1.RoleMaster, Phase: "Ready", EtcdSnapshotAt: at(40 * time.Second), LastReport: at(4 * time.Second)},
		{Name: "c1-m3", Role: v1.RoleMaster, Phase: "Unresponsive", EtcdSnapshotAt: at(50 * time.Hour), LastReport: at(17 * time.Minute)},
		{Name: "c1-w1", Role: v1.RoleWorker, Phase: "Booting"},
	}
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	printClusterNodes(w, nodes, now)
	w.Flush()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	header := lines[0]
	for column, wants := range map[string][]string{
		"ETCD SNAPSHOT": {"3h ago", "40s ago", "2d ago", "-"},
		"REPORTED":      {"1m ago", "4s ago", "17m ago", "-"},
	} {
		col := strings.Index(header, column)
		if col < 0 {
			t.Fatalf("no %s column: %q", column, header)
		}
		for i, want := range wants {
			if cell := lines[i+1][col:]; !strings.HasPrefix(cell, want+" ") {
				t.Errorf("%s: %s %q, want the column to say %q", nodes[i].Name, column, cell, want)
			}
		}
	}
}
