package integration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/integration/upgradewatch"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// What the upgrade in the lab writes before and reads back after.
const (
	upgradeKeys       = 1000
	upgradeKeyPrefix  = "harmony-upgrade/"
	upgradeConfigMaps = 100
)

// nextNodeOVA is the second node image of this checkout (make
// next-image), the one the lab's cluster is upgraded to.
func nextNodeOVA(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("HARMONY_NEXT_IMAGES")
	if dir == "" {
		t.Fatal("HARMONY_NEXT_IMAGES is unset: run make next-image (a second node image of this checkout, to upgrade to), or make unit")
	}
	found, _ := filepath.Glob(filepath.Join(dir, "harmony-node-*.ova"))
	if len(found) != 1 {
		t.Fatalf("want one harmony-node-*.ova in %s, found %v: run make next-image", dir, found)
	}
	return found[0]
}

// preloadTestImages loads agnhost into every worker VM the upgrade adds,
// as soon as its body runs: the lab has no registry, so a pod moved onto
// a new worker finds its image there (on a real site, the registry).
func (l *labUnderTest) preloadTestImages(t *testing.T, known []string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	archive := filepath.Join(os.Getenv("HARMONY_TEST_IMAGES"), "agnhost.tar")
	go func() {
		defer close(done)
		loaded := map[string]bool{}
		for _, n := range known {
			loaded[n] = true
		}
		for ctx.Err() == nil {
			vms, err := lab.RunningVMs(l.stateDir)
			if err == nil {
				for _, vm := range vms {
					if loaded[vm.Name] || !strings.Contains(vm.Name, "-w") {
						continue
					}
					if err := vm.LoadImage(ctx, archive); err == nil {
						loaded[vm.Name] = true
						t.Logf("loaded agnhost into the new worker %s", vm.Name)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// killAtEachSwapStep kills the lab's controller with SIGKILL, and starts
// it again, the first time it sees a master's replacement at each step
// (and at each of the new VM's create steps while it is cloned), until
// the returned stop; stop returns the steps it interrupted. The steps of
// one replacement that pass too fast to be seen are caught on the next
// master's.
func (l *labUnderTest) killAtEachSwapStep(t *testing.T) (stop func() []string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var killed []string
	go func() {
		defer close(done)
		seen := map[string]bool{}
		for ctx.Err() == nil {
			c, err := l.ctl.Cluster(ctx, lab.ClusterName)
			for _, n := range clusterNodes(c, err) {
				step := n.Upgrade
				if step == v1.SwapCloning {
					step += "/" + n.Step
				}
				if n.Role != v1.RoleMaster || n.Upgrade == "" || seen[step] {
					continue
				}
				seen[step] = true
				start := time.Now()
				if err := lab.KillController(ctx, l.stateDir); err != nil {
					if ctx.Err() == nil {
						t.Errorf("kill the controller at %s %s: %v", n.Name, step, err)
					}
					return
				}
				killed = append(killed, step)
				t.Logf("killed the controller at %s %s; it answered again after %s", n.Name, step, time.Since(start).Round(100*time.Millisecond))
				break // the cluster has moved on meanwhile
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() []string { cancel(); <-done; return killed }
}

func clusterNodes(c *v1.Cluster, err error) []v1.ClusterNode {
	if err != nil {
		return nil
	}
	return c.Status.Nodes
}

func configMapsManifest(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: upgrade-%d, namespace: default}\ndata: {n: \"%d\"}\n", i, i)
	}
	return b.String()
}

const netexecBudget = `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: netexec, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: netexec}}
`

// checkUpgrade moves the lab's cluster to the second node image of this
// checkout by reimage (harmonyctl cluster upgrade), while clients use the
// API through the VIP and the netexec Deployment serves with a disruption
// budget of one. One master (the last by name) takes the fresh-disk path,
// as for a disk that cannot move: it comes back as a new member on a new
// disk, and the member list holds no trace of its old member.
// Afterwards every key, ConfigMap and pod is there, every other master
// is the same etcd member on the same data disk, and every node runs the
// new image; no old VM is left. It prints what the issue asks to
// measure: the longest run of failed API samples and the etcd leader
// elections, and each replacement's time. Meanwhile the controller is
// killed with SIGKILL at each step of the masters' replacements it sees
// (the kill test), and the upgrade goes on after each restart.
func (l *labUnderTest) checkUpgrade(t *testing.T) {
	ctx := context.Background()
	img, err := lab.ImportImage(ctx, l.stateDir, nextNodeOVA(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	before := l.cluster(t)
	masters := l.masters(t)
	ids := map[string]uint64{}
	disks := map[string]string{}
	var ips []string
	for _, m := range masters {
		ids[m.Name] = l.memberID(t, masters[0], m.Name)
		ips = append(ips, m.IP)
	}
	for _, n := range before.Status.Nodes {
		disks[n.Name] = n.DataDisk
	}
	ea, err := upgradewatch.NewEtcd(l.body(t, masters[0].Name))
	if err != nil {
		t.Fatal(err)
	}
	for i := range upgradeKeys {
		if err := ea.Put(masters[0].IP, fmt.Sprintf("%s%04d", upgradeKeyPrefix, i), strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.kubectl(t, configMapsManifest(upgradeConfigMaps)+"---\n"+netexecBudget, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}

	var known []string
	for _, n := range before.Status.Nodes {
		known = append(known, n.Name)
	}
	stopPreload := l.preloadTestImages(t, known)
	defer stopPreload()
	watch := upgradewatch.Start(upgradewatch.Target{APIServer: l.sum.APIServer, Kube: l.kubeClient(t, 2*time.Second),
		ConfigMap: "upgrade-1", Deployment: netexecApp, Etcd: ea, MasterIPs: ips, Controller: l.ctl, Cluster: lab.ClusterName})
	start := time.Now()
	fresh := masters[len(masters)-1].Name
	op, err := l.ctl.UpgradeCluster(ctx, lab.ClusterName, v1.UpgradeRequest{Image: img.Name, FreshDisk: []string{fresh}})
	if err != nil {
		watch.Stop()
		t.Fatal(err)
	}
	stopKilling := l.killAtEachSwapStep(t)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Minute)
	done, err := l.ctl.WaitOperation(wctx, op.ID, nil)
	cancel()
	took := time.Since(start)
	killed := stopKilling()
	s := watch.Stop()
	if err != nil || done.State != v1.OperationSucceeded {
		t.Fatalf("upgrade after %s: %v %+v", took.Round(time.Second), err, done)
	}
	// The kill test: each step the controller was killed at was resumed.
	t.Logf("the controller was killed (SIGKILL) at %d steps of the masters' replacements: %v", len(killed), killed)
	// The lab's vCenter takes a second for each task, so each step is
	// seen at least once in three replacements.
	for _, step := range []string{v1.SwapHandingOver, v1.SwapHandedOver, v1.SwapOldOff, v1.SwapDiskDetached,
		v1.SwapCloning + "/", v1.SwapVerifying, v1.SwapVerified} {
		if !slices.ContainsFunc(killed, func(k string) bool { return k == step || strings.HasSuffix(step, "/") && strings.HasPrefix(k, step) }) {
			t.Errorf("the controller was never killed at %s", step)
		}
	}

	// What the issue asks to print.
	t.Logf("upgrade to %s: %s for %d masters and %d workers", img.Name, took.Round(time.Second), len(masters), before.Spec.Workers)
	for _, n := range slices.Sorted(maps.Keys(s.Replaced)) {
		t.Logf("  %s replaced in %s: %s", n, s.Replaced[n].Round(time.Second), s.Timeline(n))
	}
	elections := s.Elections()
	t.Logf("API through the VIP: %d samples every 100 ms, %d failed; longest run of failures %d (%s, from %s); fewest netexec pods ready %d; etcd leader elections %d (%d masters)",
		s.Samples, s.Failed, s.LongestRun, time.Duration(s.LongestRun)*100*time.Millisecond, s.LongestAt.Format(time.TimeOnly), s.MinReady, elections, len(masters))

	// Each master saved its etcd before it was replaced (the first
	// replacement waited for it), and its replacement reports a snapshot.
	var unsaved string
	testutil.Eventually(t, 2*time.Minute, "every master reporting an etcd snapshot since the upgrade started", func() bool {
		unsaved = ""
		for _, n := range l.cluster(t).Status.Nodes {
			if n.Role == v1.RoleMaster && (n.EtcdSnapshotAt == nil || !v1.EtcdSnapshotCovers(*n.EtcdSnapshotAt, start)) {
				unsaved += fmt.Sprintf(" %s (%v)", n.Name, n.EtcdSnapshotAt)
			}
		}
		return unsaved == ""
	}, func() { t.Logf("started %s; not since then:%s", start.Format(time.TimeOnly), unsaved) })

	// Nothing lost.
	if n, err := ea.Count(l.masters(t)[0].IP, upgradeKeyPrefix); err != nil || n != upgradeKeys {
		t.Errorf("etcd holds %d keys under %s after the upgrade, want %d (%v)", n, upgradeKeyPrefix, upgradeKeys, err)
	}
	out, err := l.kubectl(t, "", "get", "configmaps", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), "configmap/upgrade-"); got != upgradeConfigMaps {
		t.Errorf("%d upgrade ConfigMaps after the upgrade, want %d", got, upgradeConfigMaps)
	}
	// The workload's pods come back Ready on the new workers: measured,
	// not asserted yet. In one CI run a pod on a new worker that reused a
	// removed worker's address stayed unready (see issue 14's note: the
	// address moves to a new MAC, and peers keep the old one a while).
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ready := 0
		for _, p := range l.netexecPods(t) {
			if !p.readySince().IsZero() {
				ready++
			}
		}
		if ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("target missed: %d of the 2 netexec pods Ready 3 minutes after the upgrade", ready)
			l.logEvents(t)
			break
		}
		time.Sleep(2 * time.Second)
	}
	if s.MinReady < 1 {
		// The workload keeps serving through its disruption budget. It
		// did not while every kubelet reached the API through the first
		// master's own address (cluster-info), nor when the lab's disk
		// went under the kubelets' eviction threshold.
		t.Errorf("the netexec Deployment had %d ready pods at %s; its disruption budget keeps one", s.MinReady, s.MinReadyAt.Format(time.TimeOnly))
		l.logEvents(t)
	}
	if s.LongestRun > 0 {
		t.Logf("target missed: %d API samples in a row failed (target: none with one retry)", s.LongestRun)
	}
	if elections > len(masters) {
		t.Logf("target missed: %d leader elections for %d masters (target: at most one per master)", elections, len(masters))
	}

	// Every master but the fresh one is the same member on the same
	// disk; every node runs the new image; no old VM is left.
	l.checkMembers(t, l.masters(t))
	for name, id := range ids {
		got := l.memberID(t, masters[0], name)
		switch {
		case name == fresh && got == id:
			t.Errorf("%s took the fresh-disk path, but is still etcd member %x", name, id)
		case name != fresh && got != id:
			t.Errorf("%s is etcd member %x after the upgrade, was %x", name, got, id)
		}
	}
	after := l.cluster(t)
	if u := after.Status.Upgrade; u == nil || u.State != v1.UpgradeSucceeded || u.Upgraded != u.Nodes {
		t.Errorf("upgrade status %+v", u)
	}
	for _, n := range after.Status.Nodes {
		if n.Image != img.Name || n.Phase != "Ready" || n.Upgrade != "" {
			t.Errorf("node %s after the upgrade: image %s, phase %s, upgrade %q", n.Name, n.Image, n.Phase, n.Upgrade)
		}
		switch {
		case n.Role != v1.RoleMaster:
		case n.Name == fresh && (n.DataDisk == disks[n.Name] || !strings.Contains(n.DataDisk, "/"+fresh+"-")):
			t.Errorf("%s took the fresh-disk path, but has data disk %s (had %s)", n.Name, n.DataDisk, disks[n.Name])
		case n.Name != fresh && n.DataDisk != disks[n.Name]:
			t.Errorf("%s has data disk %s, had %s", n.Name, n.DataDisk, disks[n.Name])
		}
	}
	for _, m := range masters {
		if ok, err := l.vm(t, m.Name+"-old").Exists(ctx); err != nil || ok {
			t.Errorf("the old VM %s-old is still there (%v)", m.Name, err)
		}
	}
	// The replaced workers' Nodes go too: the first master prunes a Node
	// no longer in the cluster once it has been silent for two minutes.
	testutil.Eventually(t, 5*time.Minute, "every Kubernetes Node Ready and schedulable, no other left", func() bool {
		nodes := l.kubeNodes(t)
		for _, n := range nodes {
			if !n.ready() || n.Spec.Unschedulable {
				return false
			}
		}
		return len(nodes) == len(after.Status.Nodes)
	}, func() { t.Logf("nodes %+v", l.kubeNodes(t)) })
}

// logEvents logs the cluster's events and pods as they are now, for a
// failure to be read.
func (l *labUnderTest) logEvents(t *testing.T) {
	for _, e := range l.cluster(t).Status.Events {
		t.Logf("  %s %s %s %s", e.Time.Format(time.TimeOnly), e.Type, e.Reason, e.Message)
	}
	out, _ := l.kubectl(t, "", "get", "events", "-A", "--sort-by=.lastTimestamp")
	t.Logf("Kubernetes events:\n%s", tail(string(out), 60))
}
