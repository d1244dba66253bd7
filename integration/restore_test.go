package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/components/etcd"
	"github.com/harmonykaas/harmony/agent/components/kubeadm"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// clusterID is the etcd cluster ID master's member reports.
func (l *labUnderTest) clusterID(t *testing.T, master v1.ClusterNode) uint64 {
	t.Helper()
	out, err := l.etcdctl(t, master, "endpoint", "status")
	if err != nil {
		t.Fatalf("%s: etcdctl endpoint status: %v: %s", master.Name, err, out)
	}
	var res []struct {
		Status struct {
			Header struct {
				ClusterID uint64 `json:"cluster_id"`
			} `json:"header"`
		} `json:"Status"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res) != 1 || res[0].Status.Header.ClusterID == 0 {
		t.Fatalf("%s: etcdctl endpoint status: %v: %s", master.Name, err, out)
	}
	return res[0].Status.Header.ClusterID
}

// configMapValue is the value v of a ConfigMap, or "" when there is none.
func (l *labUnderTest) configMapValue(t *testing.T, name string) (string, error) {
	out, err := l.kubectl(t, "", "get", "configmap", name, "--ignore-not-found", "-o", "jsonpath={.data.v}")
	return strings.TrimSpace(string(out)), err
}

// checkRestore: a snapshot asked for through harmonyctl's API (cluster
// snapshot) is taken by every master and copied to the controller; the
// masters then lose it, as with their datastore, and the controller's
// copy restores the cluster (cluster restore --from-controller), the
// source fetching it: a ConfigMap changed after it is back as it was, one
// made after it is gone, etcd is the three masters in a new cluster, each
// master's old state is kept and its control plane restarted, the API
// takes writes through the VIP again, and a controller manager and
// scheduler of after the restore lead.
func (l *labUnderTest) checkRestore(t *testing.T) {
	ctx := context.Background()
	masters := l.masters(t)
	source := masters[1]
	if out, err := l.kubectl(t, "", "create", "configmap", "restore-kept", "--from-literal=v=before"); err != nil {
		t.Fatalf("kubectl create configmap: %v: %s", err, out)
	}
	asked := time.Now().UTC().Truncate(time.Second)
	op, err := l.ctl.SnapshotCluster(ctx, lab.ClusterName)
	l.waitOperation(t, op, err)
	cl := l.cluster(t)
	req := cl.Status.EtcdSnapshotRequest
	if req == nil || !req.Copied || req.TakenAt.Before(asked) {
		t.Fatalf("the snapshot asked at %s: %+v, want one taken since, copied to the controller", asked.Format(time.RFC3339), req)
	}
	taken := req.TakenAt
	// The first answers; every master takes one in its next pass.
	var late []string
	testutil.Eventually(t, 2*time.Minute, "every master reporting a snapshot since the request", func() bool {
		late = nil
		for _, n := range l.cluster(t).Status.Nodes {
			if n.Role == v1.RoleMaster && (n.EtcdSnapshotAt == nil || n.EtcdSnapshotAt.Before(asked)) {
				late = append(late, fmt.Sprintf("%s: %v", n.Name, n.EtcdSnapshotAt))
			}
		}
		return len(late) == 0
	}, func() { t.Logf("masters whose newest snapshot is before %s: %q", asked.Format(time.RFC3339), late) })
	copied := v1.EtcdSnapshotCopy{TakenAt: taken}
	for _, c := range cl.Status.EtcdSnapshotCopies {
		if c.TakenAt.Equal(taken) {
			copied = c
		}
	}
	if held := l.holdingCopy(t, copied, masters); !slices.Contains(held, req.Master) {
		t.Errorf("masters holding the snapshot answered (%s's): %v", req.Master, held)
	}
	// The masters lose it, as with their datastore: only the controller's
	// copy is left, which the source fetches.
	for _, m := range masters {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := l.body(t, m.Name).Output(ctx, "rm", "-f", etcd.DefaultDataDir+"/"+etcd.SnapshotDir+"/"+etcdsnapshot.Name(taken))
		cancel()
		if err != nil {
			t.Fatalf("%s: rm: %v: %s", m.Name, err, out)
		}
	}
	before := l.clusterID(t, source)
	if out, err := l.kubectl(t, "", "patch", "configmap", "restore-kept", "-p", `{"data":{"v":"changed"}}`); err != nil {
		t.Fatalf("kubectl patch configmap: %v: %s", err, out)
	}
	if out, err := l.kubectl(t, "", "create", "configmap", "restore-gone", "--from-literal=v=after"); err != nil {
		t.Fatalf("kubectl create configmap: %v: %s", err, out)
	}

	start := time.Now()
	op, err = l.ctl.RestoreCluster(ctx, lab.ClusterName, v1.RestoreRequest{Source: source.Name, SnapshotTakenAt: &taken, FromController: true})
	l.waitOperation(t, op, err)
	t.Logf("restore from the controller's copy of the snapshot of %s, through %s, took %s", taken.Format(time.RFC3339), source.Name, time.Since(start).Round(time.Second))
	if held := l.holdingCopy(t, copied, []v1.ClusterNode{source}); len(held) != 1 {
		t.Errorf("%s holds no fetched copy of the snapshot of %s", source.Name, taken.Format(time.RFC3339))
	}

	l.checkMembers(t, l.masters(t))
	after := l.clusterID(t, source)
	if after == before {
		t.Errorf("etcd's cluster ID is still %x after the restore", before)
	}
	var id string
	for _, n := range l.cluster(t).Status.Nodes {
		if n.Role != v1.RoleMaster {
			continue
		}
		if id == "" {
			id = n.EtcdRestored
		}
		if n.EtcdRestored == "" || n.EtcdRestored != id {
			t.Errorf("%s reports restore %q done, want the same as the others (%q)", n.Name, n.EtcdRestored, id)
		}
		if got := l.clusterID(t, n); got != after {
			t.Errorf("%s: etcd cluster %x, want the restored %x", n.Name, got, after)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := l.body(t, n.Name).Output(ctx, "sh", "-c",
			"ls -d "+etcd.DefaultDataDir+"/member.removed-before-restore-* && grep -c "+kubeadm.EtcdRestoredEnv+" "+kubeadm.APIServerManifest)
		cancel()
		if err != nil {
			t.Errorf("%s: no state set aside, or an apiserver manifest without the restore: %v: %s", n.Name, err, out)
		}
	}
	if c := l.cluster(t).Status.Conditions; strings.Contains(fmt.Sprint(c), v1.ConditionRestoring) {
		t.Errorf("conditions after the restore: %+v", c)
	}

	// Through the VIP, once the restarted apiservers serve.
	testutil.Eventually(t, 3*time.Minute, "the API serving the restored keyspace", func() bool {
		kept, err1 := l.configMapValue(t, "restore-kept")
		gone, err2 := l.configMapValue(t, "restore-gone")
		return err1 == nil && err2 == nil && kept == "before" && gone == ""
	})
	testutil.Eventually(t, 2*time.Minute, "a write after the restore", func() bool {
		out, err := l.kubectl(t, "", "create", "configmap", "restore-written-after", "--from-literal=v=new")
		return err == nil || strings.Contains(string(out), "AlreadyExists") // an earlier try's answer was lost
	})
	// The controller manager and the scheduler of after the restore lead:
	// each renews its lease (the restored one names a holder of before,
	// which a new process waits out), so the cluster acts again, not only
	// answers.
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		testutil.Eventually(t, 3*time.Minute, lease+" leading after the restore", func() bool {
			out, err := l.kubectl(t, "", "-n", "kube-system", "get", "lease", lease, "-o", "jsonpath={.spec.renewTime}")
			renewed, perr := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(out)))
			return err == nil && perr == nil && renewed.After(start)
		})
	}
	testutil.Eventually(t, 3*time.Minute, "five Ready Kubernetes nodes after the restore", func() bool {
		nodes := l.kubeNodes(t)
		ready := 0
		for _, n := range nodes {
			if n.ready() {
				ready++
			}
		}
		return len(nodes) == len(l.names()) && ready == len(nodes)
	})
	// Every master's own apiserver serves again, not only the one behind
	// the VIP: each restarted its control plane for the restore.
	for _, m := range l.masters(t) {
		l.waitComponent(t, m.Name, kubeadm.Name, "Converged", start, 3*time.Minute)
	}
}
