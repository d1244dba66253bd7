package kubeadm

import (
	"bytes"
	"context"
	"crypto/x509"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// Per role, the real kubeadm accepts what the component renders and, on
// masters, runs its local phases under a per-host root (--rootfs); a
// second pass changes nothing; a role kubeadm refuses leaves every file as
// it was.
func TestConfigsPerRole(t *testing.T) {
	bin := k8sBin(t)
	cl := newTestCluster(t)
	ctx := context.Background()

	for _, tc := range []struct {
		node          string
		want, absent  []string
		kubeconfigs   []string
		noKubeconfigs []string
	}{
		{node: "m1", want: []string{InitConfigFile}, absent: []string{JoinConfigFile},
			kubeconfigs: []string{"admin.conf", "super-admin.conf", "kubelet.conf", "controller-manager.conf", "scheduler.conf"}},
		{node: "m2", want: []string{InitConfigFile, JoinConfigFile},
			kubeconfigs: []string{"admin.conf", "controller-manager.conf", "scheduler.conf"}, noKubeconfigs: []string{"super-admin.conf", "kubelet.conf"}},
		{node: "w1", want: []string{JoinConfigFile}, absent: []string{InitConfigFile, "/etc/kubernetes/pki/ca.key"}},
	} {
		t.Run(tc.node, func(t *testing.T) {
			c, host, rec := standInHost(t, bin)
			root := host.Root
			role := cl.role(t, tc.node, 0)
			role.ProviderID = v1.VSphereProviderID("4230a5c6-1b2c-3d4e-5f60-718293a4b5c6")
			master := role.Role == v1.RoleMaster

			st := c.Reconcile(ctx, host, role)
			if st.Phase != reconcile.PhaseConverged {
				t.Fatalf("first pass: %+v", st)
			}
			// The kubelet's provider ID, the node's own, reaches kubeadm
			// as a patch of the cluster's KubeletConfiguration, in the
			// directory each configuration names.
			if got := string(readFile(t, host.Path(KubeletPatchFile))); got != "providerID: "+role.ProviderID+"\n" {
				t.Errorf("kubelet patch %q", got)
			}
			for _, f := range tc.want {
				if !bytes.Contains(readFile(t, host.Path(f)), []byte("directory: "+PatchesDir+"\n")) {
					t.Errorf("%s does not name the patches directory", f)
				}
			}
			for _, f := range tc.want {
				p := host.Path(f)
				info, err := os.Stat(p)
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if info.Mode().Perm() != 0o600 {
					t.Errorf("%s has mode %v, want 0600 (it holds the bootstrap token)", f, info.Mode().Perm())
				}
				if out, err := exec.Command(filepath.Join(bin, "kubeadm"), "config", "validate", "--config", p).CombinedOutput(); err != nil {
					t.Errorf("kubeadm config validate %s: %v\n%s", f, err, out)
				}
			}
			for _, f := range tc.absent {
				if _, err := os.Stat(host.Path(f)); err == nil {
					t.Errorf("%s exists on %s", f, tc.node)
				}
			}

			if master {
				checkMasterFiles(t, host, role, tc.kubeconfigs, tc.noKubeconfigs)
				checkStandIn(t, rec, root, filepath.Join(bin, "kube-apiserver"))
				if !slices.Equal(st.Units, []string{APIServerUnit}) || st.Healthy || !strings.Contains(st.Message, "not ready") {
					t.Errorf("master status without an apiserver: %+v", st)
				}
				init := readFile(t, host.Path(InitConfigFile))
				if got := bytes.Contains(init, []byte(testToken)); got != (tc.node == "m1") {
					t.Errorf("init.yaml on %s carries the bootstrap token: %v; only the first master creates it", tc.node, got)
				}
				var cc clusterConfiguration
				if err := yaml.Unmarshal(document(t, init, "ClusterConfiguration"), &cc); err != nil {
					t.Fatal(err)
				}
				if cc.ControlPlaneEndpoint != "198.18.0.10:8443" || cc.Etcd.External.Endpoints[0] != EtcdEndpoint ||
					cc.KubernetesVersion != c.version || !slices.Contains(cc.APIServer.CertSANs, "198.18.0.10") {
					t.Errorf("ClusterConfiguration: %+v", cc)
				}
				// The kubelets ask the cluster CA for their serving
				// certificates, and the apiserver verifies them.
				var kc kubeletConfiguration
				if err := yaml.Unmarshal(document(t, init, "KubeletConfiguration"), &kc); err != nil {
					t.Fatal(err)
				}
				if !kc.ServerTLSBootstrap || !kc.RotateCertificates {
					t.Errorf("KubeletConfiguration: %+v", kc)
				}
				// No control-plane component serves profiling.
				for _, m := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
					if !bytes.Contains(readFile(t, host.Path(ManifestsDir+"/"+m+".yaml")), []byte("--profiling=false")) {
						t.Errorf("%s serves profiling", m)
					}
				}
				// It keeps an audit log, from the policy and into the
				// directory its pod mounts.
				manifest := readFile(t, host.Path(APIServerManifest))
				for _, want := range []string{"--kubelet-certificate-authority=" + CACertFile,
					"--audit-policy-file=" + AuditPolicyFile, "--audit-log-path=" + AuditLogFile, "--audit-log-maxbackup=10",
					"path: " + AuditLogDir + "\n      type: DirectoryOrCreate", "path: " + AuditPolicyFile + "\n      type: File",
					"name: " + AuditPolicyEnv} {
					if !bytes.Contains(manifest, []byte(want)) {
						t.Errorf("the apiserver's manifest lacks %q:\n%s", want, manifest)
					}
				}
			} else if !st.Healthy || !strings.Contains(st.Message, "does not join") || len(rec.TakeCalls()) != 0 {
				t.Errorf("worker without a kubelet: %+v", st)
			}
			if slices.Contains(tc.want, JoinConfigFile) {
				checkJoin(t, host, role, master)
			}

			rec.TakeCalls()
			if st := c.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged || len(st.Actions) != 0 {
				t.Errorf("second pass changed something: %+v", st)
			}
			if calls := rec.TakeCalls(); len(calls) != 0 {
				t.Errorf("second pass touched units: %q", calls)
			}

			if !master {
				return
			}
			// api/v1 accepts any version; kubeadm refuses one below its
			// support window.
			broken := cl.role(t, tc.node, 0)
			broken.Cluster.KubernetesVersion = "v1.20.0"
			broken.ProviderID = role.ProviderID
			if err := broken.Validate(); err != nil {
				t.Fatal(err)
			}
			before := snapshotFiles(t, root)
			st = c.Reconcile(ctx, host, broken)
			if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, InitConfigFile) || !strings.Contains(st.Message, ">= 1.33.0") {
				t.Errorf("broken role: %+v", st)
			}
			if !st.Healthy {
				t.Errorf("broken role: the old apiserver unit still runs, but Healthy is false: %+v", st)
			}
			if after := snapshotFiles(t, root); !maps.Equal(before, after) {
				t.Error("a refused role changed files on the node")
			}
			if calls := rec.TakeCalls(); len(calls) != 0 {
				t.Errorf("a refused role touched units: %q", calls)
			}
		})
	}
}

// checkMasterFiles: the CAs from the role (keys 0600, no etcd CA key), the
// etcd client certificate the agent issued, and what kubeadm's phases made
// inside the root.
func checkMasterFiles(t *testing.T, host *reconcile.Host, role *v1.Role, kubeconfigs, noKubeconfigs []string) {
	t.Helper()
	if got := readFile(t, host.Path(CACertFile)); string(got) != role.PKI.ClusterCA.Certificate {
		t.Error("ca.crt is not the role's cluster CA")
	}
	for _, f := range []string{CAKeyFile, FrontProxyCAKeyFile, ServiceAccountKeyFile, EtcdClientKeyFile,
		"/etc/kubernetes/pki/apiserver.key", "/etc/kubernetes/pki/front-proxy-client.key"} {
		if info, err := os.Stat(host.Path(f)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want a 0600 key", f, info, err)
		}
	}
	if _, err := os.Stat(host.Path("/etc/kubernetes/pki/etcd/ca.key")); err == nil {
		t.Error("the etcd CA key was written; the apiserver needs only the certificate")
	}
	etcdCA, _ := v1.ParseCertificatesPEM([]byte(role.PKI.EtcdCA.Certificate))
	client, err := readCert(host.Path(EtcdClientCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if client.Subject.CommonName != "kube-apiserver-etcd-client" || client.CheckSignatureFrom(etcdCA[0]) != nil ||
		!slices.Equal(client.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("etcd client certificate: CN %q, usages %v", client.Subject.CommonName, client.ExtKeyUsage)
	}
	api, err := readCert(host.Path("/etc/kubernetes/pki/apiserver.crt"))
	if err != nil {
		t.Fatalf("kubeadm made no apiserver certificate under the root: %v", err)
	}
	clusterCA, _ := v1.ParseCertificatesPEM([]byte(role.PKI.ClusterCA.Certificate))
	if api.CheckSignatureFrom(clusterCA[0]) != nil {
		t.Error("apiserver.crt is not signed by the role's cluster CA")
	}
	for _, name := range []string{role.Cluster.VIP, role.Addresses.IPs[0], role.NodeName, "kubernetes"} {
		if err := api.VerifyHostname(name); err != nil {
			t.Errorf("apiserver.crt: %v", err)
		}
	}
	for _, k := range kubeconfigs {
		kc, err := readKubeconfig(host.Path(filepath.Join(KubernetesDir, k)))
		if err != nil {
			t.Errorf("%s: %v", k, err)
			continue
		}
		if ca, err := kc.caCert(); err != nil || !ca.Equal(clusterCA[0]) {
			t.Errorf("%s does not trust the role's CA", k)
		}
	}
	for _, k := range noKubeconfigs {
		if _, err := os.Stat(host.Path(filepath.Join(KubernetesDir, k))); err == nil {
			t.Errorf("%s exists on %s", k, role.NodeName)
		}
	}
	for _, m := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(host.Path(filepath.Join(ManifestsDir, m+".yaml"))); err != nil {
			t.Errorf("manifest: %v", err)
		}
	}
}

// checkStandIn: the unit runs the configured binary with the manifest's
// flags, every path mapped under the root.
func checkStandIn(t *testing.T, rec *servicetest.Recorder, root, binary string) {
	t.Helper()
	u, ok := rec.Unit(APIServerUnit)
	if !ok {
		t.Fatal("no kube-apiserver unit")
	}
	if u.Command[0] != binary {
		t.Errorf("stand-in runs %q, want %q", u.Command[0], binary)
	}
	for _, want := range []string{
		"--client-ca-file=" + filepath.Join(root, "/etc/kubernetes/pki/ca.crt"),
		"--etcd-certfile=" + filepath.Join(root, EtcdClientCertFile),
		"--etcd-servers=" + EtcdEndpoint,
		"--secure-port=6443",
	} {
		if !slices.Contains(u.Command, want) {
			t.Errorf("stand-in command lacks %q: %q", want, u.Command)
		}
	}
	for _, arg := range u.Command[1:] {
		if _, v, ok := strings.Cut(arg, "="); ok && strings.HasPrefix(v, "/") && !strings.HasPrefix(v, root+"/") {
			t.Errorf("%q is not mapped under the root", arg)
		}
	}
}

// checkJoin: token discovery against the VIP, pinned to the cluster CA by
// the hash kubeadm's documentation computes with openssl.
func checkJoin(t *testing.T, host *reconcile.Host, role *v1.Role, master bool) {
	t.Helper()
	var jc joinConfiguration
	if err := yaml.Unmarshal(readFile(t, host.Path(JoinConfigFile)), &jc); err != nil {
		t.Fatal(err)
	}
	d := jc.Discovery.BootstrapToken
	if d.APIServerEndpoint != "198.18.0.10:8443" || d.Token != testToken || jc.Discovery.TLSBootstrapToken != testToken {
		t.Errorf("discovery: %+v", jc.Discovery)
	}
	if want := opensslCAHash(t, role.PKI.ClusterCA.Certificate); !slices.Equal(d.CACertHashes, []string{want}) {
		t.Errorf("caCertHashes %q, want %q", d.CACertHashes, want)
	}
	if (jc.ControlPlane != nil) != master {
		t.Errorf("controlPlane %+v on a master=%v", jc.ControlPlane, master)
	}
	if master && jc.ControlPlane.LocalAPIEndpoint.AdvertiseAddress != role.Addresses.IPs[0] {
		t.Errorf("control plane advertises %+v", jc.ControlPlane.LocalAPIEndpoint)
	}
}

func opensslCAHash(t *testing.T, certPEM string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", "openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum")
	cmd.Stdin = strings.NewReader(certPEM)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl: %v", err)
	}
	return "sha256:" + strings.Fields(string(out))[0]
}

func TestWorkerWithoutTokenFails(t *testing.T) {
	bin := k8sBin(t)
	role := newTestCluster(t).role(t, "w1", 0)
	role.Kubeadm = nil
	host := &reconcile.Host{Root: t.TempDir(), Services: servicetest.New()}
	st := New(Config{Binary: filepath.Join(bin, "kubeadm"), DialContext: refuseDial}).Reconcile(context.Background(), host, role)
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "kubeadm.bootstrapToken") {
		t.Errorf("worker without a token: %+v", st)
	}
}

func TestNotANodeIsDisabled(t *testing.T) {
	rec := servicetest.New()
	host := &reconcile.Host{Root: t.TempDir(), Services: rec}
	role := newTestCluster(t).role(t, "w1", 0)
	role.Role = v1.RoleAppliance
	st := New(Config{}).Reconcile(context.Background(), host, role)
	if st.Phase != reconcile.PhaseDisabled || !st.Healthy || len(st.Actions) != 0 {
		t.Errorf("appliance: %+v", st)
	}
}

func TestUnderRoot(t *testing.T) {
	host := &reconcile.Host{Root: "/lab/m1"}
	for in, want := range map[string]string{
		"--client-ca-file=/etc/kubernetes/pki/ca.crt": "--client-ca-file=/lab/m1/etc/kubernetes/pki/ca.crt",
		"--etcd-servers=https://127.0.0.1:2379":       "--etcd-servers=https://127.0.0.1:2379",
		"--files=/a,/b/c":                             "--files=/lab/m1/a,/lab/m1/b/c",
		"--allow-privileged=true":                     "--allow-privileged=true",
		"--verbose":                                   "--verbose",
		"/etc/x":                                      "/lab/m1/etc/x",
	} {
		if got := underRoot(host, in); got != want {
			t.Errorf("underRoot(%q) = %q, want %q", in, got, want)
		}
	}
	if got := underRoot(&reconcile.Host{Root: "/"}, "--a=/etc/x"); got != "--a=/etc/x" {
		t.Errorf("root /: %q", got)
	}
}

func TestFirstMaster(t *testing.T) {
	cl := newTestCluster(t)
	for name, want := range map[string]bool{"m1": true, "m2": false, "m3": false} {
		got, err := isFirstMaster(cl.role(t, name, 0))
		if err != nil || got != want {
			t.Errorf("%s: first=%v, %v; want %v", name, got, err, want)
		}
	}
	alone := cl.role(t, "m2", 0)
	alone.Peers = nil
	if first, err := isFirstMaster(alone); !first || err != nil {
		t.Errorf("a master without peers: %v, %v", first, err)
	}
	stranger := cl.role(t, "m2", 0)
	stranger.NodeName = "m9"
	if _, err := isFirstMaster(stranger); err == nil || !strings.Contains(err.Error(), "peers") {
		t.Errorf("a master missing from peers: %v", err)
	}
}

func TestOutputMessageRedactsTheToken(t *testing.T) {
	out := "[bootstrap-token] Using token: " + testToken + "\nerror: token 0123456789abcdef refused\nTo see the stack trace of this error execute with --v=5 or higher\n"
	msg := outputMessage(out, testToken)
	if strings.Contains(msg, "0123456789abcdef") || !strings.Contains(msg, "error: token REDACTED refused") {
		t.Errorf("message %q", msg)
	}
	if got := commandName([]string{"/usr/bin/kubeadm", "--rootfs", "/r", "init", "phase", "certs", "all", "--config", "/c"}); got != "kubeadm init phase certs all" {
		t.Errorf("commandName: %q", got)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// document returns the YAML document of the given kind.
func document(t *testing.T, multi []byte, kind string) []byte {
	t.Helper()
	for _, doc := range bytes.Split(multi, []byte("---\n")) {
		if bytes.Contains(doc, []byte("kind: "+kind+"\n")) {
			return doc
		}
	}
	t.Fatalf("no %s document", kind)
	return nil
}

// snapshotFiles maps every regular file under root to its content.
func snapshotFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestClusterPhaseFlags: every flag the cluster phases pass is one the
// real kubeadm's phase accepts (kubeadm refuses unknown flags, and the
// kubelet-only phases run on no host here but a VM or a lab body).
func TestClusterPhaseFlags(t *testing.T) {
	kubeadm := filepath.Join(k8sBin(t), "kubeadm")
	for _, args := range clusterPhaseArgs(true, true) {
		var phase []string
		var flags []string
		for _, a := range args {
			switch {
			case strings.HasPrefix(a, "--"):
				flags = append(flags, a)
			case len(flags) == 0:
				phase = append(phase, a)
			}
		}
		help, err := exec.Command(kubeadm, append(phase, "--help")...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubeadm %s --help: %v\n%s", strings.Join(phase, " "), err, help)
		}
		for _, f := range flags {
			if !strings.Contains(string(help), f+" ") {
				t.Errorf("kubeadm %s takes no %s", strings.Join(phase, " "), f)
			}
		}
	}
}

// A joined worker is healthy only while its kubelet answers /healthz: a
// kubelet that bootstrapped and then keeps failing makes the node
// unhealthy, with the kubelet's own answer in the message.
func TestJoinedWorkerIsHealthyOnlyWithItsKubelet(t *testing.T) {
	bin := k8sBin(t)
	var failing atomic.Bool
	kubelet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		if failing.Load() {
			http.Error(w, "[-]syncloop failed: reason withheld", http.StatusInternalServerError)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer kubelet.Close()
	role := newTestCluster(t).role(t, "w1", 0)
	host := &reconcile.Host{Root: t.TempDir(), Services: servicetest.New()}
	// Joined already: kubeadm join left the kubelet's kubeconfig.
	if err := os.MkdirAll(filepath.Dir(host.Path(KubeletKubeconfig)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host.Path(KubeletKubeconfig), []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := New(Config{Binary: filepath.Join(bin, "kubeadm"), Kubelet: true, KubeletHealthURL: kubelet.URL + "/healthz"})
	st := c.Reconcile(context.Background(), host, role)
	if st.Phase != reconcile.PhaseConverged || !st.Healthy || !strings.Contains(st.Message, "kubelet healthy") {
		t.Errorf("joined worker, kubelet healthy: %+v", st)
	}
	failing.Store(true)
	st = c.Reconcile(context.Background(), host, role)
	if st.Phase != reconcile.PhaseConverged || st.Healthy || !strings.Contains(st.Message, "500") {
		t.Errorf("joined worker, kubelet failing: %+v", st)
	}
	kubelet.Close()
	st = c.Reconcile(context.Background(), host, role)
	if st.Healthy || !strings.Contains(st.Message, "kubelet: GET /healthz") {
		t.Errorf("joined worker, no kubelet: %+v", st)
	}
}

// While the node image's first-boot unit still imports the container
// images, neither a worker nor a joining master runs kubeadm join (its
// image preflight would fail), and a master writes nothing of kubeadm's
// yet; the stamp is an input, and once it exists the join runs.
func TestJoinWaitsForTheImageImport(t *testing.T) {
	bin := k8sBin(t)
	cl := newTestCluster(t)
	for _, name := range []string{"w1", "m2"} {
		t.Run(name, func(t *testing.T) {
			host := &reconcile.Host{Root: t.TempDir(), Services: servicetest.New()}
			imagesDir, stamp := "/usr/share/harmony/images", "/var/lib/harmony-images/imported"
			if err := os.MkdirAll(host.Path(imagesDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(host.Path(imagesDir+"/pause.tar"), []byte("not read"), 0o644); err != nil {
				t.Fatal(err)
			}
			var joins atomic.Int32
			c := New(Config{
				Binary: filepath.Join(bin, "kubeadm"), Kubelet: true, DialContext: refuseDial,
				ImagesDir: imagesDir, ImagesImported: stamp, CommandTimeout: 5 * time.Second,
				Command: func(ctx context.Context, argv []string) *exec.Cmd {
					if slices.Contains(argv, "join") {
						joins.Add(1)
					}
					return exec.CommandContext(ctx, argv[0], argv[1:]...)
				},
			})
			if got := c.Inputs(); !slices.Equal(got, []string{stamp}) {
				t.Errorf("inputs %q, want the stamp", got)
			}
			role := cl.role(t, name, 0)
			st := c.Reconcile(context.Background(), host, role)
			if joins.Load() != 0 || st.Healthy || !strings.Contains(st.Message, "first-boot import") || !strings.Contains(st.Message, stamp) {
				t.Errorf("images not imported: %d joins, %+v", joins.Load(), st)
			}
			if exists(host.Path(ManifestsDir)) || exists(host.Path(PKIDir+"/apiserver.crt")) {
				t.Errorf("kubeadm's local phases ran before the images were imported")
			}
			if err := os.MkdirAll(filepath.Dir(host.Path(stamp)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(host.Path(stamp), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			// No apiserver answers here, so the join itself fails.
			st = c.Reconcile(context.Background(), host, role)
			if joins.Load() != 1 || st.Phase != reconcile.PhaseFailed {
				t.Errorf("images imported: %d joins, %+v", joins.Load(), st)
			}
		})
	}
}

// The stand-in apiserver reads its certificates only at start, so a new
// cluster CA must owe its restart before any file it reads changes. While
// the debt cannot be recorded (the marker's directory is a file here), the
// pass fails and changes nothing; once it can, the next pass writes the
// new PKI and restarts the apiserver.
func TestStandInRestartIsOwedBeforeItsCertificatesChange(t *testing.T) {
	cl := newTestCluster(t)
	ctx := context.Background()
	c, host, rec := standInHost(t, k8sBin(t))
	root := host.Root
	if st := c.Reconcile(ctx, host, cl.role(t, "m1", 0)); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("first pass: %+v", st)
	}
	rec.TakeCalls()

	rotated := cl.role(t, "m1", 0)
	rotated.PKI.ClusterCA = newTestCluster(t).clusterCA
	blocker := host.Path(reconcile.ReloadMarkerDir)
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, root)
	if st := c.Reconcile(ctx, host, rotated); st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "mark reload") {
		t.Errorf("pass that cannot owe the restart: %+v", st)
	}
	after := snapshotFiles(t, root)
	for path, data := range after {
		if before[path] != data {
			t.Errorf("%s changed while the apiserver's restart could not be owed", strings.TrimPrefix(path, root))
		}
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("units touched: %q", calls)
	}

	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	st := c.Reconcile(ctx, host, rotated)
	if st.Phase != reconcile.PhaseConverged {
		t.Fatalf("pass after the marker's directory came back: %+v", st)
	}
	if got := string(readFile(t, host.Path(CACertFile))); got != rotated.PKI.ClusterCA.Certificate {
		t.Error("ca.crt is not the rotated CA")
	}
	if calls := rec.TakeCalls(); !slices.Contains(calls, "reload "+APIServerUnit) {
		t.Errorf("the apiserver was not restarted for its new certificates: %q", calls)
	}
	if host.ReloadMarker(APIServerUnit).Pending() {
		t.Error("the restart is still owed after it happened")
	}
}

// standInHost is a component with the real kubeadm that stands in for the
// kubelet, and a host of its own under a new root, whose units are recorded.
func standInHost(t *testing.T, bin string) (*Component, *reconcile.Host, *servicetest.Recorder) {
	rec := servicetest.New()
	host := &reconcile.Host{Root: t.TempDir(), Services: rec, Log: slog.New(slog.DiscardHandler)}
	c := New(Config{
		Binary: filepath.Join(bin, "kubeadm"), APIServerBinary: filepath.Join(bin, "kube-apiserver"),
		StandInForKubelet: true, DialContext: refuseDial,
	})
	return c, host, rec
}

// While the role asks for an etcd restore the local member has not done
// its part of, the control plane stays stopped (no manifests, no
// stand-in); once it has, the control plane starts afresh: the three
// manifests carry the restore's ID in their environment (the kubelet
// restarts a pod whose manifest changed; the stand-in, a unit whose
// environment changed), and the same ID again changes nothing, also once
// the role no longer asks.
func TestAnEtcdRestoreRestartsTheControlPlaneOnce(t *testing.T) {
	bin := k8sBin(t)
	cl := newTestCluster(t)
	ctx := context.Background()
	c, host, rec := standInHost(t, bin)
	restored := ""
	c.cfg.EtcdRestored = func() string { return restored }
	role := cl.role(t, "m2", 0)
	if st := c.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("first pass: %+v", st)
	}
	manifests := []string{"kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"}
	carries := func(id string) {
		t.Helper()
		for _, name := range manifests {
			data := readFile(t, host.Path(ManifestsDir+"/"+name))
			_, after, has := bytes.Cut(data, []byte("name: "+EtcdRestoredEnv+"\n"))
			if has != (id != "") || has && !bytes.HasPrefix(bytes.TrimSpace(after), []byte("value: "+id+"\n")) {
				t.Errorf("%s carries restore %q: %v", name, id, has)
			}
		}
		u, _ := rec.Unit(APIServerUnit)
		if want := EtcdRestoredEnv + "=" + id; slices.Contains(u.Env, want) != (id != "") {
			t.Errorf("stand-in environment %q, want %q in it: %v", u.Env, want, id != "")
		}
	}
	carries("")
	rec.TakeCalls()

	role.Etcd = &v1.EtcdSettings{Restore: &v1.EtcdRestore{ID: "r1", Source: "m1", SnapshotTakenAt: time.Unix(1e9, 0)}}
	for range 2 {
		st := c.Reconcile(ctx, host, role)
		if st.Phase != reconcile.PhaseConverged || st.Healthy || !strings.Contains(st.Message, "control plane stopped until this master's etcd member has done its part of restore r1") {
			t.Fatalf("pass while the restore is pending: %+v", st)
		}
		for _, name := range manifests {
			if exists(host.Path(ManifestsDir + "/" + name)) {
				t.Errorf("%s is still there while the restore is pending", name)
			}
		}
	}
	if calls := rec.TakeCalls(); !slices.Contains(calls, "stop "+APIServerUnit) {
		t.Errorf("the stand-in apiserver was not stopped for the restore: %q", calls)
	}

	restored = "r1"
	st := c.Reconcile(ctx, host, role)
	if st.Phase != reconcile.PhaseConverged || !slices.Contains(st.Actions, "ran kubeadm init phase control-plane all") {
		t.Fatalf("pass after the restore: %+v", st)
	}
	carries("r1")
	if calls := rec.TakeCalls(); !slices.Contains(calls, "ensure "+APIServerUnit) {
		t.Errorf("the apiserver was not restarted after the restore: %q", calls)
	}
	if out, err := exec.Command(filepath.Join(bin, "kubeadm"), "config", "validate", "--config", host.Path(InitConfigFile)).CombinedOutput(); err != nil {
		t.Errorf("kubeadm config validate: %v\n%s", err, out)
	}
	if st := c.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged || len(st.Actions) != 0 {
		t.Errorf("second pass after the restore acted: %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("second pass after the restore touched units: %q", calls)
	}
	role.Etcd = nil // the restore ended
	if st := c.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged || len(st.Actions) != 0 {
		t.Errorf("pass once the role no longer asks for the restore: %+v", st)
	}
}
