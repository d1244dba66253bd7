package cni

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/harmonykaas/harmony/agent/components/cni/contiv"
	"github.com/harmonykaas/harmony/agent/components/cni/flannel"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

const renderOnly = "contiv binaries not installed on this host; configuration rendered and validated only"

// Without Contiv's binaries (this lab, any host without them), everything
// is rendered and validated, no unit is ensured, and the status says so.
func TestRenderOnlyWithoutBinaries(t *testing.T) {
	ctx := context.Background()
	p := testPKI(t)
	for _, name := range []string{"m1", "w1"} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			rec := servicetest.New()
			host := testHost(root, rec)
			c := New(Config{Contiv: absentBinaries(t)})
			role := testRole(t, name, p)

			st := c.Reconcile(ctx, host, role)
			if st.Phase != reconcile.PhaseConverged || !st.Healthy || !strings.HasPrefix(st.Message, renderOnly) {
				t.Fatalf("status %+v", st)
			}
			if calls := rec.TakeCalls(); len(calls) != 0 {
				t.Errorf("units ensured without binaries: %q", calls)
			}
			if len(st.Units) != 0 {
				t.Errorf("status names units %q it does not run", st.Units)
			}
			if !slices.Contains(st.Actions, "wrote "+contiv.ConfListPath) || !slices.Contains(st.Actions, "wrote "+contiv.K8sConfigPath) {
				t.Errorf("actions %q", st.Actions)
			}

			// The CNI list on disk, read back as the runtime reads it.
			list, err := libcni.ConfListFromFile(filepath.Join(root, contiv.ConfListPath))
			if err != nil {
				t.Fatal(err)
			}
			if list.CNIVersion != "0.3.1" || list.Plugins[0].Network.Type != "contivk8s" {
				t.Errorf("conflist %s %q", list.CNIVersion, list.Plugins[0].Network.Type)
			}
			var k8s contiv.K8sConfig
			readJSON(t, filepath.Join(root, contiv.K8sConfigPath), &k8s)
			if k8s.APIServer != "https://198.18.0.10:8443" || k8s.ServiceSubnet != "198.19.128.0/20" {
				t.Errorf("contiv.json %+v", k8s)
			}
			if info, err := os.Stat(filepath.Join(root, contiv.K8sConfigPath)); err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("contiv.json mode: %v %v", info, err)
			}

			if name == "m1" {
				var spec contiv.NetworkSpec
				readJSON(t, filepath.Join(root, contiv.NetworkPath), &spec)
				if spec.Network.Subnet != "198.19.0.0/17" || spec.Network.PktTag != 4096 {
					t.Errorf("network.json %+v", spec.Network)
				}
				// Issued from the role's CAs, keys 0600.
				checkIssued(t, root, contiv.K8sCertPath, contiv.K8sKeyPath, p.ClusterCA, "contiv:m1")
				checkIssued(t, root, contiv.EtcdCertPath, contiv.EtcdKeyPath, p.EtcdCA, "contiv:m1")
				if strings.Contains(st.Message, "lacks") {
					t.Errorf("a master lacks something: %s", st.Message)
				}
			} else {
				if _, err := os.Stat(filepath.Join(root, contiv.NetworkPath)); !os.IsNotExist(err) {
					t.Errorf("a worker has network.json: %v", err)
				}
				// Workers get no CA keys: the status says what is missing.
				if !strings.Contains(st.Message, "pki.etcdCA") || !strings.Contains(st.Message, contiv.K8sCertPath) {
					t.Errorf("worker message %q", st.Message)
				}
			}

			// Idempotent: nothing changes, nothing is ensured.
			before := snapshot(t, root)
			st2 := c.Reconcile(ctx, host, role)
			if st2.Phase != reconcile.PhaseConverged || len(st2.Actions) != 0 || st2.Message != st.Message {
				t.Errorf("second pass %+v", st2)
			}
			if calls := rec.TakeCalls(); len(calls) != 0 {
				t.Errorf("second pass calls %q", calls)
			}
			sameSnapshot(t, before, snapshot(t, root))
		})
	}
}

// An image that ships Contiv sets RequireDaemons: a missing binary fails.
func TestRequireDaemons(t *testing.T) {
	cfg := absentBinaries(t)
	rec := servicetest.New()
	c := New(Config{Contiv: cfg, RequireDaemons: true})
	st := c.Reconcile(context.Background(), testHost(t.TempDir(), rec), testRole(t, "m1", testPKI(t)))
	if st.Phase != reconcile.PhaseFailed || st.Healthy || !strings.Contains(st.Message, cfg.NetpluginBinary) ||
		!strings.Contains(st.Message, cfg.NetmasterBinary) {
		t.Errorf("status %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("calls %q", calls)
	}
}

// A role the component cannot serve fails with the field named, and every
// file stays byte for byte as it was.
func TestBadRoleKeepsFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	host := testHost(root, servicetest.New())
	c := New(Config{Contiv: absentBinaries(t)})
	p := testPKI(t)
	if st := c.Reconcile(ctx, host, testRole(t, "m1", p)); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("first pass %+v", st)
	}
	before := snapshot(t, root)

	for _, tc := range []struct {
		name   string
		mutate func(r *v1.Role)
		want   string
	}{
		{"no pod CIDR", func(r *v1.Role) { r.Cluster.PodCIDR = "" }, "cluster.podCIDR: required"},
		// api/v1 refuses these; injected past it, the component refuses
		// them too.
		{"unknown CNI", func(r *v1.Role) { r.Cluster.CNI.Type = "calico" }, `cluster.cni.type: unknown CNI "calico"; this agent knows contiv`},
		{"VNI out of range", func(r *v1.Role) { r.Cluster.CNI.Contiv.VNI = 1 << 24 }, "cluster.cni.contiv.vni"},
		{"IPv6 pods", func(r *v1.Role) { r.Cluster.PodCIDR = "fd00::/64" }, "cluster.podCIDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role := testRole(t, "m1", p)
			tc.mutate(role)
			st := c.Reconcile(ctx, host, role)
			if st.Phase != reconcile.PhaseFailed || st.Healthy || !strings.Contains(st.Message, tc.want) || len(st.Actions) != 0 {
				t.Errorf("status %+v, want Failed naming %q", st, tc.want)
			}
			sameSnapshot(t, before, snapshot(t, root))
		})
	}
}

// With the binaries in place the units run in order, a second pass
// changes nothing, a changed file restarts the units that read it, the
// pod network goes to netmaster, and a master turned worker stops
// netmaster. The manager is a Recorder: these are the component's
// decisions; e2e_test.go runs processes.
func TestUnitsWithBinaries(t *testing.T) {
	ctx := context.Background()
	nm, port := newStandInNetmasterAPI(t)
	cfg := placeholderBinaries(t)
	cfg.NetmasterPort = port
	rec := servicetest.New()
	root := t.TempDir()
	host := testHost(root, rec)
	c := New(Config{Contiv: cfg, RequireDaemons: true})
	p := testPKI(t)
	role := testRole(t, "m1", p)

	st := c.Reconcile(ctx, host, role)
	want := []string{contiv.EtcdProxyUnit, contiv.NetmasterUnit, contiv.NetpluginUnit}
	if st.Phase != reconcile.PhaseConverged || !st.Healthy || !slices.Equal(st.Units, want) {
		t.Fatalf("first pass %+v", st)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"ensure contiv-etcd-proxy", "ensure contiv-netmaster", "ensure contiv-netplugin"}) {
		t.Errorf("calls %q", calls)
	}
	for _, a := range []string{"started contiv-netplugin", "applied contiv network default:default-net (198.19.0.0/17, VNI 4096)"} {
		if !slices.Contains(st.Actions, a) {
			t.Errorf("actions %q lack %q", st.Actions, a)
		}
	}
	if n := nm.object(t, "/api/v1/networks/default:default-net/"); n["subnet"] != "198.19.0.0/17" || n["pktTag"] != float64(4096) {
		t.Errorf("netmaster holds %v", n)
	}
	netplugin, _ := rec.Unit(contiv.NetpluginUnit)
	if i := slices.Index(netplugin.Command, "--vtep-ip"); i < 0 || netplugin.Command[i+1] != "198.18.0.11" {
		t.Errorf("netplugin argv %q", netplugin.Command)
	}

	st = c.Reconcile(ctx, host, role)
	if len(st.Actions) != 0 || !st.Healthy {
		t.Errorf("second pass %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("second pass calls %q", calls)
	}

	// contiv.json changes: netplugin and netmaster re-read it (neither
	// reloads on a signal, so the manager restarts them); the proxy does
	// not read it.
	role.Cluster.ServiceCIDR = "198.19.144.0/20"
	st = c.Reconcile(ctx, host, role)
	if !slices.Equal(st.Actions, []string{"wrote " + contiv.K8sConfigPath, "reloaded contiv-netmaster", "reloaded contiv-netplugin"}) {
		t.Errorf("service CIDR pass actions %q", st.Actions)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"reload contiv-netmaster", "reload contiv-netplugin"}) {
		t.Errorf("service CIDR pass calls %q", calls)
	}

	// A new VNI goes to netmaster; no daemon restarts.
	role.Cluster.CNI.Contiv.VNI = 4097
	st = c.Reconcile(ctx, host, role)
	if !slices.Equal(st.Actions, []string{"wrote " + contiv.NetworkPath, "applied contiv network default:default-net (198.19.0.0/17, VNI 4097)"}) {
		t.Errorf("VNI pass actions %q", st.Actions)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("VNI pass calls %q", calls)
	}

	// The node becomes a worker (keeping the CAs, so that it stays
	// runnable): netmaster stops, its network spec goes.
	role.Role = v1.RoleWorker
	st = c.Reconcile(ctx, host, role)
	if !slices.Equal(st.Actions, []string{"stopped contiv-netmaster", "removed " + contiv.NetworkPath}) || !st.Healthy ||
		!slices.Equal(st.Units, []string{contiv.EtcdProxyUnit, contiv.NetpluginUnit}) {
		t.Errorf("worker pass %+v", st)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"stop contiv-netmaster"}) {
		t.Errorf("worker pass calls %q", calls)
	}

	// Binaries present but the role lacks the etcd CA: the node means to
	// run Contiv and cannot.
	role.PKI = &v1.ClusterPKI{ClusterCA: p.ClusterCA}
	st = c.Reconcile(ctx, host, role)
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "pki.etcdCA") {
		t.Errorf("no etcd CA: %+v", st)
	}
}

// Another CNI in the registry: switching removes Contiv's files and
// units; a candidate configuration its checker refuses keeps the live one.
func TestSwitchCNIAndRefusedConfList(t *testing.T) {
	ctx := context.Background()
	cfg := placeholderBinaries(t)
	_, port := newStandInNetmasterAPI(t)
	cfg.NetmasterPort = port
	good := []byte(`{"cniVersion":"1.0.0","name":"testnet","plugins":[{"type":"bridge"}]}` + "\n")
	other := &testPlugin{conflist: good, binary: cfg.NetpluginBinary}
	c := newWithPlugins(Config{}, contiv.New(cfg), other)
	rec := servicetest.New()
	root := t.TempDir()
	host := testHost(root, rec)
	role := testRole(t, "m1", testPKI(t))
	if st := c.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged || !st.Healthy {
		t.Fatalf("contiv pass %+v", st)
	}
	rec.TakeCalls()

	role.Cluster.CNI.Type = "testcni"
	st := c.Reconcile(ctx, host, role)
	if st.Phase != reconcile.PhaseConverged || !st.Healthy {
		t.Fatalf("switch pass %+v", st)
	}
	calls := rec.TakeCalls()
	for _, want := range []string{"stop contiv-netplugin", "stop contiv-netmaster", "stop contiv-etcd-proxy", "ensure testcni-daemon"} {
		if !slices.Contains(calls, want) {
			t.Errorf("switch calls %q lack %q", calls, want)
		}
	}
	for _, f := range (&contiv.Plugin{}).Owned().Files {
		if _, err := os.Stat(filepath.Join(root, f)); !os.IsNotExist(err) {
			t.Errorf("%s left after the switch: %v", f, err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "/etc/cni/net.d")); len(entries) != 1 {
		t.Errorf("net.d holds %v; the runtime would pick the first", entries)
	}

	before := snapshot(t, root)
	other.conflist = []byte(`{"cniVersion":"1.0.0","name":"testnet","plugins":[{"type":"macvlan"}]}`)
	st = c.Reconcile(ctx, host, role)
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "refused") || !strings.Contains(st.Message, `"macvlan"`) {
		t.Errorf("refused pass %+v", st)
	}
	sameSnapshot(t, before, snapshot(t, root))
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("refused pass calls %q", calls)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func checkIssued(t *testing.T, root, certPath, keyPath string, ca *v1.KeyPair, cn string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, certPath))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := v1.ParseCertificatesPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	cas, _ := v1.ParseCertificatesPEM([]byte(ca.Certificate))
	if err := certs[0].CheckSignatureFrom(cas[0]); err != nil || certs[0].Subject.CommonName != cn ||
		!slices.Equal(certs[0].ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("%s: CN %q usages %v, %v", certPath, certs[0].Subject.CommonName, certs[0].ExtKeyUsage, err)
	}
	if info, err := os.Stat(filepath.Join(root, keyPath)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("%s mode: %v %v", keyPath, info, err)
	}
}

// flannel through the component: waiting (not failed) for the kubelet's
// credential with nothing started, then flanneld, then the bridge
// configuration over its lease, healthy; a switch to Contiv stops
// flanneld and removes its files.
func TestFlannelWaitsThenRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fl := flannel.Config{Binary: filepath.Join(dir, "flanneld"), CNIBinDir: dir}
	for _, b := range []string{"flanneld", "bridge", "host-local", "portmap", "loopback"} {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Config{Flannel: fl, Contiv: absentBinaries(t), RequireDaemons: true})
	rec := servicetest.New()
	root := t.TempDir()
	host := testHost(root, rec)
	role := testRole(t, "w1", testPKI(t))
	role.Cluster.CNI = v1.CNISettings{Type: "flannel"}

	st := c.Reconcile(ctx, host, role)
	if st.Phase != reconcile.PhaseConverged || st.Healthy || !strings.Contains(st.Message, "waiting for the kubelet's credential") {
		t.Fatalf("before the join: %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("before the join, calls %q", calls)
	}

	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(flannel.KubeletKubeconfig, "apiVersion: v1\n")
	st = c.Reconcile(ctx, host, role)
	if st.Healthy || !strings.Contains(st.Message, "lease") || !slices.Equal(st.Units, []string{flannel.Unit}) {
		t.Fatalf("joined, no lease: %+v", st)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"ensure flannel"}) {
		t.Errorf("joined, calls %q", calls)
	}

	write(flannel.SubnetFile, "FLANNEL_NETWORK=198.19.0.0/17\nFLANNEL_SUBNET=198.19.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	st = c.Reconcile(ctx, host, role)
	if !st.Healthy || st.Message != "" || !slices.Contains(st.Actions, "wrote "+flannel.ConfListPath) {
		t.Fatalf("with a lease: %+v", st)
	}
	list, err := libcni.ConfListFromFile(filepath.Join(root, flannel.ConfListPath))
	if err != nil || list.Name != "harmony-flannel" || list.Plugins[0].Network.Type != "bridge" {
		t.Fatalf("conflist %+v %v", list, err)
	}

	role.Cluster.CNI = v1.CNISettings{Type: "contiv"}
	c.Reconcile(ctx, host, role)
	if calls := rec.TakeCalls(); !slices.Contains(calls, "stop flannel") {
		t.Errorf("switch to contiv, calls %q", calls)
	}
	for _, f := range []string{flannel.ConfListPath, flannel.NetConfPath} {
		if _, err := os.Stat(filepath.Join(root, f)); !os.IsNotExist(err) {
			t.Errorf("%s left after the switch: %v", f, err)
		}
	}
}
