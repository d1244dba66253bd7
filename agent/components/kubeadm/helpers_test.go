package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/pki"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// k8sBin is the directory of the kubeadm and kube-apiserver that `make
// kubernetes` builds from the pinned module. These tests run the real
// binaries; without them they fail rather than skip.
func k8sBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("HARMONY_K8S_BIN")
	if dir == "" {
		t.Fatal("HARMONY_K8S_BIN is unset: run make kubernetes (these tests run the real kubeadm and kube-apiserver), or make unit")
	}
	for _, b := range []string{"kubeadm", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("HARMONY_K8S_BIN=%s: %v (run make kubernetes)", dir, err)
		}
	}
	return dir
}

const testToken = "abcdef.0123456789abcdef"

// testCluster holds one cluster's CAs, as the controller would.
type testCluster struct {
	clusterCA, frontProxyCA, etcdCA *v1.KeyPair
	saKey                           string
}

func newTestCluster(t *testing.T) *testCluster {
	t.Helper()
	cl := &testCluster{}
	var err error
	for _, ca := range []struct {
		cn  string
		dst **v1.KeyPair
	}{{"kubernetes", &cl.clusterCA}, {"front-proxy-ca", &cl.frontProxyCA}, {"etcd-ca", &cl.etcdCA}} {
		if *ca.dst, err = pki.NewCA(ca.cn, 24*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if cl.saKey, err = pki.NewKey(); err != nil {
		t.Fatal(err)
	}
	return cl
}

// role is a valid role of node name in a cluster of three masters
// (m1 has rank 0, listed last on purpose) and a worker, on subnet
// 198.18.<net>.0/24 with the VIP at .10.
func (cl *testCluster) role(t *testing.T, name string, net int) *v1.Role {
	t.Helper()
	addr := func(host int) string { return fmt.Sprintf("198.18.%d.%d", net, host) }
	peers := []v1.Peer{
		{Name: "m3", Role: v1.RoleMaster, Address: addr(13), Rank: 2},
		{Name: "w1", Role: v1.RoleWorker, Address: addr(21)},
		{Name: "m2", Role: v1.RoleMaster, Address: addr(12), Rank: 1},
		{Name: "m1", Role: v1.RoleMaster, Address: addr(11), Rank: 0},
	}
	r := &v1.Role{
		APIVersion: v1.APIVersion, Kind: "Role", NodeName: name, Revision: 1,
		Cluster: v1.ClusterSettings{
			Name: "demo", VIP: addr(10), VRID: 51,
			PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", DNSDomain: "cluster.local",
		},
		Peers:   peers,
		Kubeadm: &v1.KubeadmSettings{BootstrapToken: testToken},
	}
	for _, p := range peers {
		if p.Name == name {
			r.Role = p.Role
			r.Addresses.IPs = []string{p.Address}
		}
	}
	if r.Role == v1.RoleMaster {
		r.PKI = &v1.ClusterPKI{ClusterCA: cl.clusterCA, FrontProxyCA: cl.frontProxyCA, EtcdCA: cl.etcdCA, ServiceAccountKey: cl.saKey}
	} else {
		r.PKI = &v1.ClusterPKI{ClusterCA: &v1.KeyPair{Certificate: cl.clusterCA.Certificate}}
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("test role is not valid: %v", err)
	}
	return r
}

// refuseDial stands for "no apiserver here", so that a test never asks
// whatever else listens on this machine's 127.0.0.1:6443.
func refuseDial(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no apiserver in this test")
}

// newNetns makes a network namespace with lo up and eth0 (a veth whose
// peer stays inside) holding addr/24; it is removed when the test ends.
func newNetns(t *testing.T, addr string) string {
	t.Helper()
	ns := testutil.VethNetns(t, "kadm")
	testutil.IP(t, "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
	return ns
}

// inNetns runs a command inside the namespace.
func inNetns(ns string) func(ctx context.Context, argv []string) *exec.Cmd {
	return func(ctx context.Context, argv []string) *exec.Cmd {
		return exec.CommandContext(ctx, "/usr/bin/ip", append([]string{"netns", "exec", ns}, argv...)...)
	}
}
