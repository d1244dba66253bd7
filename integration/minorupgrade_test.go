package integration

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/internal/testutil"
	"github.com/harmonykaas/harmony/ova/archive"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// minorLabSubnet keeps TestLabKubernetesMinorUpgrade's lab apart from the
// others.
var minorLabSubnet = netip.MustParsePrefix("198.18.112.0/24")

// TestLabKubernetesMinorUpgrade creates a cluster at Kubernetes n-1, which
// the node image carries beside n, and upgrades it by reimage to n with the
// next image. First, an upgrade to an image whose agent refuses its role
// is rolled back at once: the old VM serves again with its disk and etcd
// member.
// Afterwards every kubelet, the control plane and the cluster-level parts
// that kubeadm keeps are at n, and nothing is lost.
func TestLabKubernetesMinorUpgrade(t *testing.T) {
	pins := kubernetesPins(t)
	n, prev := pins[0].Version, pins[1].Version
	l := upLab(t, lab.Config{Masters: 1, Workers: 1, Subnet: minorLabSubnet, KubernetesVersion: prev,
		// The bound on the bad image's VM, whose agent's refusal should
		// roll it back well before, and on each new VM of the good
		// upgrade, the surge worker too (Ready about a minute after its
		// power-on when the machine is idle; CI runs other packages'
		// tests beside it).
		UpgradeNodeTimeout: 10 * time.Minute,
	})
	seen := l.names()
	t.Run("every node at n-1", func(t *testing.T) {
		if v := l.kubernetesVersion(t); v != prev {
			t.Fatalf("the cluster is at %s, want %s", v, prev)
		}
		l.checkKubernetesNodes(t)
		l.checkControlPlaneVersion(t, prev)
	})
	if _, err := l.kubectl(t, "", "create", "configmap", "minor-upgrade", "--from-literal=kept=yes"); err != nil {
		t.Fatal(err)
	}
	master := l.masters(t)[0]
	id := l.memberID(t, master, master.Name)
	before := l.cluster(t)

	t.Run("an image whose agent refuses its role is rolled back at once", func(t *testing.T) {
		claim := strings.TrimSuffix(n, n[strings.LastIndex(n, ".")+1:]) + "99"
		img, done, err := l.upgradeTo(t, badNodeOVA(t, nextNodeOVA(t), claim), claim, 20*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the upgrade to %s ended %s after %s: %s", img.Name, done.State, done.FinishedAt.Sub(done.CreatedAt).Round(time.Second), done.Message)
		// Rolled back for the new VM's refusal (its kubeadm has no
		// kubelet of the claimed version), not for anything before it
		// and not at the timeout.
		if done.State != v1.OperationFailed || !strings.Contains(done.Message, master.Name+" was rolled back") ||
			!strings.Contains(done.Message, "refused its role: kubeadm: kubernetesVersion "+claim) {
			t.Errorf("want a failed upgrade that says %s was rolled back, its new VM refusing its role for want of %s", master.Name, claim)
		}
		l.checkServesAsBefore(t, before, id)
	})

	t.Run("n-1 to n by reimage, nothing lost", func(t *testing.T) {
		start := time.Now()
		img, done, err := l.upgradeTo(t, nextNodeOVA(t), n, 30*time.Minute)
		if err != nil || done.State != v1.OperationSucceeded {
			l.logEvents(t)
			t.Fatalf("upgrade to %s at %s: %v %+v", img.Name, n, err, done)
		}
		t.Logf("upgrade from %s to %s: %s for 1 master and 1 worker", prev, n, time.Since(start).Round(time.Second))
		if v := l.kubernetesVersion(t); v != n {
			t.Errorf("the cluster is at %s, want %s", v, n)
		}
		testutil.Eventually(t, 5*time.Minute, "every Kubernetes Node Ready, no other left", func() bool {
			nodes := l.kubeNodes(t)
			for _, n := range nodes {
				if !n.ready() {
					return false
				}
			}
			return len(nodes) == len(l.cluster(t).Status.Nodes)
		}, func() { t.Logf("nodes %+v", l.kubeNodes(t)) })
		l.checkKubernetesNodes(t)
		l.checkControlPlaneVersion(t, n)
		if got := l.memberID(t, l.masters(t)[0], master.Name); got != id {
			t.Errorf("%s is etcd member %x after the upgrade, was %x", master.Name, got, id)
		}
		l.checkKept(t, "the upgrade")
	})
	seen = append(seen, l.names()...)
	l.down(t, seen)
}

// upgradeTo imports the node OVA ova into the lab and upgrades the
// cluster to it at Kubernetes version, waiting up to timeout for the end.
func (l *labUnderTest) upgradeTo(t *testing.T, ova, version string, timeout time.Duration) (*v1.Image, *v1.Operation, error) {
	t.Helper()
	ctx := context.Background()
	img, err := lab.ImportImage(ctx, l.stateDir, ova, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	op, err := l.ctl.UpgradeCluster(ctx, lab.ClusterName, v1.UpgradeRequest{Image: img.Name, KubernetesVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done, err := l.ctl.WaitOperation(wctx, op.ID, nil)
	return img, done, err
}

// checkKept: the ConfigMap written before the upgrades is there.
func (l *labUnderTest) checkKept(t *testing.T, after string) {
	t.Helper()
	if out, err := l.kubectl(t, "", "get", "configmap", "minor-upgrade", "-o", "jsonpath={.data.kept}"); err != nil || string(out) != "yes" {
		t.Errorf("the ConfigMap after %s: %q, %v", after, out, err)
	}
}

// checkServesAsBefore: after a rollback every node runs its old image on
// its old disk, the master is the same etcd member, the API answers
// through the VIP and holds what was written, and no VM of the new image
// is left.
func (l *labUnderTest) checkServesAsBefore(t *testing.T, before *v1.Cluster, memberID uint64) {
	t.Helper()
	old := map[string]v1.ClusterNode{}
	for _, n := range before.Status.Nodes {
		old[n.Name] = n
	}
	// Ready as the controller sees it: the agent and its Kubernetes Node,
	// what the next upgrade's checks ask for.
	testutil.Eventually(t, 5*time.Minute, "every node and its Kubernetes Node Ready again on its old image", func() bool {
		for _, n := range l.cluster(t).Status.Nodes {
			if n.Phase != "Ready" || n.Kubernetes != "Ready" || n.Image != old[n.Name].Image {
				return false
			}
		}
		return l.readyz(t)
	}, func() { l.logEvents(t) })
	after := l.cluster(t)
	for _, n := range after.Status.Nodes {
		if o, ok := old[n.Name]; !ok || n.DataDisk != o.DataDisk || n.VM != o.VM {
			t.Errorf("node %s after the rollback: VM %s, disk %s; before: VM %s, disk %s", n.Name, n.VM, n.DataDisk, o.VM, o.DataDisk)
		}
	}
	if len(after.Status.Nodes) != len(before.Status.Nodes) {
		t.Errorf("%d nodes after the rollback, %d before", len(after.Status.Nodes), len(before.Status.Nodes))
	}
	m := l.masters(t)[0]
	if got := l.memberID(t, m, m.Name); got != memberID {
		t.Errorf("%s is etcd member %x after the rollback, was %x", m.Name, got, memberID)
	}
	l.checkKept(t, "the rollback")
	if ok, err := l.vm(t, m.Name+"-old").Exists(context.Background()); err != nil || ok {
		t.Errorf("a VM %s-old is left after the rollback (%v)", m.Name, err)
	}
}

// checkControlPlaneVersion: the API server reports version, and the
// kubeadm-config ConfigMap, which kubeadm's later joins and upgrades read,
// names it.
func (l *labUnderTest) checkControlPlaneVersion(t *testing.T, version string) {
	t.Helper()
	testutil.Eventually(t, 3*time.Minute, "the API server at "+version, func() bool {
		out, err := l.kubectl(t, "", "version", "-o", "json")
		var v struct {
			ServerVersion struct{ GitVersion string } `json:"serverVersion"`
		}
		return err == nil && json.Unmarshal(out, &v) == nil && v.ServerVersion.GitVersion == version
	}, func() {
		out, err := l.kubectl(t, "", "version", "-o", "json")
		t.Logf("kubectl version: %s %v", out, err)
	})
	out, err := l.kubectl(t, "", "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}")
	if err != nil || !strings.Contains(string(out), "kubernetesVersion: "+version+"\n") {
		t.Errorf("kubeadm-config names another version than %s: %s %v", version, out, err)
	}
}

// badNodeOVA writes a copy of the node OVA src whose descriptor claims
// Kubernetes claim as its n, which it does not carry, under a version of
// its own: a VM of it refuses its role for good (no kubelet of that
// version), so it never gets Ready. It stands for an image built wrong.
func badNodeOVA(t *testing.T, src, claim string) string {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var descriptor []byte
	var disks []archive.Disk
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(h.Name) {
		case ".ovf":
			if descriptor, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		case ".vmdk":
			path := filepath.Join(dir, filepath.Base(h.Name))
			out, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			disks = append(disks, archive.DiskFile(path))
		}
	}
	d, err := ovf.Parse(descriptor)
	if err != nil {
		t.Fatal(err)
	}
	d.Product.Version += "-bad"
	d.Product.FullVersion += "-bad"
	for i, p := range d.Properties {
		switch p.Key {
		case "harmony.image.version":
			d.Properties[i].Default += "-bad"
		case "harmony.version.kubernetes":
			d.Properties[i].Default = claim
		}
	}
	rendered, err := ovf.Render(d)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "harmony-node-bad.ova")
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	err = archive.Write(context.Background(), out, archive.Options{Name: d.Name, Descriptor: rendered, Disks: disks})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, disk := range disks {
		os.Remove(filepath.Join(dir, disk.Name)) // the OVA holds it now
	}
	return dst
}
