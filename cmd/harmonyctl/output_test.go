package main

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// cluster get shows how old each master's newest etcd snapshot is, and a
// dash for a node that has none.
func TestClusterNodesShowTheEtcdSnapshotsAge(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	nodes := []v1.ClusterNode{
		{Name: "c1-m1", Role: v1.RoleMaster, Phase: "Ready", EtcdSnapshotAt: at(3*time.Hour + 59*time.Minute)},
		{Name: "c1-m2", Role: v1.RoleMaster, Phase: "Ready", EtcdSnapshotAt: at(40 * time.Second)},
		{Name: "c1-m3", Role: v1.RoleMaster, Phase: "Ready", EtcdSnapshotAt: at(50 * time.Hour)},
		{Name: "c1-w1", Role: v1.RoleWorker, Phase: "Ready"},
	}
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	printClusterNodes(w, nodes, now)
	w.Flush()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	header := lines[0]
	col := strings.Index(header, "ETCD SNAPSHOT")
	if col < 0 {
		t.Fatalf("no ETCD SNAPSHOT column: %q", header)
	}
	for i, want := range []string{"3h ago", "40s ago", "2d ago", "-"} {
		if cell := lines[i+1][col:]; !strings.HasPrefix(cell, want+" ") {
			t.Errorf("%s: %q, want the column to say %q", nodes[i].Name, cell, want)
		}
	}
}
