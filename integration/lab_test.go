package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/components/etcd"
	"github.com/harmonykaas/harmony/agent/components/kubeadm"
	"github.com/harmonykaas/harmony/agent/staticnet"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/integration/lab/body"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// The tests' labs keep apart from a user's (198.18.100.0/24) and from
// each other.
var (
	labSubnet     = netip.MustParsePrefix("198.18.110.0/24")
	killLabSubnet = netip.MustParsePrefix("198.18.111.0/24")
)

// labInputs are what the lab is built from: make build's binaries and make
// images' node OVA.
func labInputs(t *testing.T) (binDir, imagesDir string) {
	binDir, imagesDir = os.Getenv("HARMONY_BIN"), os.Getenv("HARMONY_IMAGES")
	if binDir == "" || imagesDir == "" {
		t.Fatal("HARMONY_BIN or HARMONY_IMAGES is not set: run the tests with make test (the lab boots the node image from make images)")
	}
	return binDir, imagesDir
}

// TestLab runs the whole system as `make lab` does: vcsim, the controller
// importing the node OVA and creating a 3+2 cluster through its API, and
// every VM the controller powers on booted from the node image. It proves
// the lab's claims against it, in order.
func TestLab(t *testing.T) {
	l := upLab(t, lab.Config{Masters: 3, Workers: 2, Subnet: labSubnet,
		// Time for the upgrade's kill test to land inside each task.
		VCenterLatency: time.Second,
	})
	seen := l.names()

	t.Run("summary", l.checkSummary)
	t.Run("enrolled through guestinfo", l.checkEnrolledThroughGuestinfo)
	t.Run("addresses from guestinfo", l.checkAddresses)
	t.Run("etcd has the three masters, healthy", func(t *testing.T) { l.checkMembers(t, l.masters(t)) })
	t.Run("each master snapshots etcd onto its data disk", l.checkEtcdSnapshots)
	t.Run("prometheus scrapes every agent and the controller", l.checkPrometheus)
	t.Run("five Ready Kubernetes nodes", l.checkKubernetesNodes)
	t.Run("kubelets serve certificates from the cluster CA, which the apiserver checks", l.checkKubeletServing)
	t.Run("pod network: pod to pod over VXLAN, a Service by name", l.checkPodNetwork)
	t.Run("every master keeps an audit log; the workload's creation is in it", l.checkAuditLog)
	t.Run("a user with a view grant: kubectl reads, RBAC refuses a delete", l.checkUserAccess)
	t.Run("an LDAP group's grant: kubectl reads, RBAC refuses, leaving the group ends it", l.checkDirectoryAccess)
	t.Run("VIP failover when its holder is powered off", l.checkFailover)
	t.Run("etcd snapshot on demand, copied; lost on every master, restored from the controller's copy: later writes gone, the API serves", l.checkRestore)
	t.Run("a worker removed", l.checkRemoveWorker)
	t.Run("masters 3 to 5 to 3", l.checkScaleMasters)
	t.Run("a broken master replaced by a new VM on its data disk, the same etcd member", l.checkReplaceMaster)
	// Last: the nodes it makes have new names and addresses.
	t.Run("upgrade by reimage to the next image, nothing lost", l.checkUpgrade)
	t.Run("prometheus follows the upgrade: it scrapes the new nodes, not the old", l.checkPrometheus)
	t.Run("the new nodes' kubelets serve certificates from the cluster CA", l.checkKubeletServing)
	seen = append(seen, l.names()...)
	l.down(t, seen)
}

// upLab builds a lab of cfg from make build's binaries and make images'
// node OVA, in a directory of the test's, and removes it when the test
// ends (with its logs when it failed) unless down did first.
func upLab(t *testing.T, cfg lab.Config) *labUnderTest {
	binDir, imagesDir := labInputs(t)
	testutil.Heavy(t)
	stateDir := filepath.Join(t.TempDir(), "lab")
	logs := &testutil.LogBuffer{}
	l := &labUnderTest{t: t, stateDir: stateDir}
	t.Cleanup(func() {
		if t.Failed() {
			dumpLabLogs(t, stateDir)
		}
		if !l.downed {
			if err := lab.Down(context.Background(), stateDir, nil); err != nil {
				t.Errorf("lab down: %v", err)
			}
		}
	})
	cfg.StateDir, cfg.BinDir, cfg.ImagesDir = stateDir, binDir, imagesDir
	cfg.Timeout = 15 * time.Minute
	cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	start := time.Now()
	sum, err := lab.Up(context.Background(), cfg)
	if err != nil {
		t.Logf("lab log:\n%s", tail(logs.String(), 60))
		t.Fatalf("lab up: %v", err)
	}
	t.Logf("lab ready in %s", time.Since(start).Round(100*time.Millisecond))
	l.sum, l.ctl = sum, labController(t, stateDir)
	return l
}

// down removes the lab and checks that nothing of it is left, the VMs
// seen included.
func (l *labUnderTest) down(t *testing.T, seen []string) {
	l.downed = true
	if err := lab.Down(context.Background(), l.stateDir, nil); err != nil {
		t.Fatalf("lab down: %v", err)
	}
	checkNothingLeft(t, l.stateDir, l.netnsPrefix(), seen)
}

// TestLabDownAfterKill kills `harmonyctl lab up` while its VMs boot; `lab
// down` then removes everything it had made.
func TestLabDownAfterKill(t *testing.T) {
	binDir, imagesDir := labInputs(t)
	stateDir := filepath.Join(t.TempDir(), "lab")
	var out bytes.Buffer
	up := exec.Command(filepath.Join(binDir, "harmonyctl"), "lab", "up", "--state", stateDir,
		"--subnet", killLabSubnet.String(), "--bin-dir", binDir, "--images-dir", imagesDir, "--masters", "1", "--workers", "1")
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		up.Process.Kill()
		up.Wait()
		lab.Down(context.Background(), stateDir, nil)
	})
	// Killed once a body runs: the controller, vcsim, Prometheus and a
	// booting VM are all up by then.
	var prefix string
	testutil.Eventually(t, 5*time.Minute, "a VM body running", func() bool {
		bodies, _ := filepath.Glob(filepath.Join(stateDir, "vms", "*", "body"))
		for _, dir := range bodies {
			if b, err := body.Open(dir, nil); err == nil && b.Running() {
				vm, err := lab.OpenVM(stateDir, b.Name)
				if err != nil {
					t.Fatal(err)
				}
				prefix = strings.TrimSuffix(vm.Netns, vm.Name)
				return true
			}
		}
		return false
	}, func() { t.Log(out.String()) })
	if err := up.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	up.Wait()
	down := exec.Command(filepath.Join(binDir, "harmonyctl"), "lab", "down", "--state", stateDir)
	if got, err := down.CombinedOutput(); err != nil {
		t.Fatalf("lab down: %v\n%s", err, got)
	}
	checkNothingLeft(t, stateDir, prefix, nil)
}

type labUnderTest struct {
	t        *testing.T
	sum      *lab.Summary
	stateDir string
	ctl      *client.Client
	// downed: the test removed the lab itself.
	downed bool
}

func labController(t *testing.T, stateDir string) *client.Client {
	conf, err := clientconfig.Load(filepath.Join(stateDir, "controller", "admin.conf"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(conf, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cluster is the controller's view of the lab's cluster.
func (l *labUnderTest) cluster(t *testing.T) *v1.Cluster {
	t.Helper()
	c, err := l.ctl.Cluster(context.Background(), lab.ClusterName)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// names are the cluster's nodes now.
func (l *labUnderTest) names() []string {
	var out []string
	for _, n := range l.cluster(l.t).Status.Nodes {
		out = append(out, n.Name)
	}
	return out
}

func (l *labUnderTest) masters(t *testing.T) []v1.ClusterNode {
	return slices.DeleteFunc(l.cluster(t).Status.Nodes, func(n v1.ClusterNode) bool { return n.Role != v1.RoleMaster })
}

func (l *labUnderTest) vm(t *testing.T, name string) *lab.VM {
	t.Helper()
	vm, err := lab.OpenVM(l.stateDir, name)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func (l *labUnderTest) body(t *testing.T, name string) *body.Body {
	t.Helper()
	b, err := l.vm(t, name).Body()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// netnsPrefix is what every namespace of this lab's VMs starts with.
func (l *labUnderTest) netnsPrefix() string {
	n := l.sum.Nodes[0]
	return strings.TrimSuffix(n.Netns, n.Name)
}

func (l *labUnderTest) checkSummary(t *testing.T) {
	s := l.sum
	var masters int
	for _, n := range s.Nodes {
		if n.Role == string(v1.RoleMaster) {
			masters++
		}
		a, err := netip.ParseAddr(n.IP)
		if err != nil || !labSubnet.Contains(a) || n.Netns == "" {
			t.Errorf("node %+v: address outside %s or no namespace", n, labSubnet)
		}
		if _, err := os.Stat(filepath.Join(n.Body, "console.log")); err != nil {
			t.Errorf("node %s: its body's console log: %v", n.Name, err)
		}
	}
	if len(s.Nodes) != 5 || masters != 3 {
		t.Fatalf("nodes %+v, want 3 masters and 2 workers", s.Nodes)
	}
	if !labSubnet.Contains(netip.MustParseAddr(s.VIP)) || s.APIServer != v1.APIServerURL(s.VIP) {
		t.Errorf("vip %s apiserver %s", s.VIP, s.APIServer)
	}
	for _, p := range []string{s.Kubeconfig, s.AdminConfig, s.VCenterCredentials} {
		info, err := os.Stat(p)
		if err != nil {
			t.Errorf("summary names %s: %v", p, err)
		} else if info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", p, info.Mode().Perm())
		}
	}
	// The kubeconfig the controller issued works through the VIP: the
	// apiserver, its external etcd and the cluster CA all agree.
	if code := l.kubeGet(t, "/api/v1/namespaces/default"); code != http.StatusOK {
		t.Fatalf("GET default namespace through the VIP: %d", code)
	}
	// Every VM is a Kubernetes node whose kubelet reports Ready: the
	// controller's Ready means the agents' kubelets answer too.
	var want []string
	for _, n := range s.Nodes {
		want = append(want, n.Name)
	}
	slices.Sort(want)
	var got []string
	testutil.Eventually(t, 2*time.Minute, "Kubernetes nodes "+strings.Join(want, ",")+" Ready", func() bool {
		got = got[:0]
		for _, n := range l.kubeNodes(t) {
			if n.ready() {
				got = append(got, n.Metadata.Name)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, want)
	}, func() { t.Logf("Ready Kubernetes nodes: %v", got) })
}

// kubeNode is what the tests read of a Kubernetes Node.
type kubeNode struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Unschedulable bool `json:"unschedulable"`
	} `json:"spec"`
	Status struct {
		Conditions []kubeCondition `json:"conditions"`
	} `json:"status"`
}

type kubeCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

func (n kubeNode) ready() bool {
	return slices.Contains(n.Status.Conditions, kubeCondition{Type: "Ready", Status: "True"})
}

// kubeNodes lists the cluster's Nodes through the VIP.
func (l *labUnderTest) kubeNodes(t *testing.T) []kubeNode {
	t.Helper()
	resp, err := l.kubeClient(t, 10*time.Second).Get(l.sum.APIServer + "/api/v1/nodes")
	if err != nil {
		t.Logf("GET /api/v1/nodes: %v", err)
		return nil
	}
	defer resp.Body.Close()
	var list struct {
		Items []kubeNode `json:"items"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&list) != nil {
		t.Logf("GET /api/v1/nodes: %s", resp.Status)
		return nil
	}
	return list.Items
}

// kubeClient calls the apiserver with the kubeconfig `lab up` wrote.
func (l *labUnderTest) kubeClient(t *testing.T, timeout time.Duration) *http.Client {
	t.Helper()
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: l.kubeTLS(t), DisableKeepAlives: true}}
}

// kubeTLS is the TLS configuration of the kubeconfig `lab up` wrote: the
// cluster CA, and the user's certificate.
func (l *labUnderTest) kubeTLS(t *testing.T) *tls.Config {
	t.Helper()
	data, err := os.ReadFile(l.sum.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubeconfig.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := kc.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

// kubeGet returns the status of GET path through the VIP. A request that
// gets no answer is tried again for up to a minute: on a loaded 2-core
// machine the first answer can take longer than one try's timeout.
func (l *labUnderTest) kubeGet(t *testing.T, path string) int {
	t.Helper()
	c := l.kubeClient(t, 5*time.Second)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := c.Get(l.sum.APIServer + path)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", path, err)
		}
		time.Sleep(time.Second)
	}
}

// checkEnrolledThroughGuestinfo: every node enrolled, and the bootstrap
// the controller wrote into its VM's guestinfo was read there: the agent
// wrote it back without its single-use token.
func (l *labUnderTest) checkEnrolledThroughGuestinfo(t *testing.T) {
	for _, n := range l.sum.Nodes {
		node, err := l.ctl.Node(context.Background(), n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if node.EnrolledAt.IsZero() || node.CertificateSerial == "" {
			t.Errorf("%s: not enrolled: %+v", n.Name, node)
		}
		value, ok, err := l.vm(t, n.Name).Guestinfo(context.Background(), v1.GuestinfoKey)
		if err != nil || !ok {
			t.Fatalf("%s: %s: %v (present %v)", n.Name, v1.GuestinfoKey, err, ok)
		}
		b, err := v1.DecodeBootstrap([]byte(value))
		if err != nil {
			t.Fatalf("%s: %s: %v", n.Name, v1.GuestinfoKey, err)
		}
		if b.Token != "" || b.NodeName != n.Name {
			t.Errorf("%s: guestinfo bootstrap still holds its token or names %q: the agent did not take it from guestinfo", n.Name, b.NodeName)
		}
	}
}

// checkAddresses: each body's address is the one the controller wrote
// into guestinfo.harmony.network (the lab has no DHCP), applied by the
// image's own network unit from the file the agent rendered.
func (l *labUnderTest) checkAddresses(t *testing.T) {
	for _, n := range l.sum.Nodes {
		value, ok, err := l.vm(t, n.Name).Guestinfo(context.Background(), v1.NetworkGuestinfoKey)
		if err != nil || !ok {
			t.Fatalf("%s: %s: %v (present %v)", n.Name, v1.NetworkGuestinfoKey, err, ok)
		}
		cfg, err := v1.DecodeNetworkGuestinfo([]byte(value))
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if want := n.IP + "/24"; cfg.Address != want || cfg.Hostname != n.Name {
			t.Errorf("%s: guestinfo network %+v, want address %s", n.Name, cfg, want)
		}
		want, err := staticnet.Render(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b := l.body(t, n.Name)
		got, err := os.ReadFile(b.Path("/" + staticnet.NetworkFile))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %s: %v\n%s\nwant\n%s", n.Name, staticnet.NetworkFile, err, got, want)
		}
		addrs, err := exec.Command("ip", "-n", n.Netns, "-o", "-4", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil || !strings.Contains(string(addrs), " "+cfg.Address+" ") {
			t.Errorf("%s: eth0 lacks %s: %v\n%s", n.Name, cfg.Address, err, addrs)
		}
		if hostname, err := b.Output(context.Background(), "hostname"); err != nil || strings.TrimSpace(string(hostname)) != n.Name {
			t.Errorf("%s: hostname %q, %v", n.Name, hostname, err)
		}
	}
}

// etcdctlMember is one member as Debian's etcdctl lists it in JSON.
type etcdctlMember struct {
	ID         uint64   `json:"ID"`
	Name       string   `json:"name"`
	IsLearner  bool     `json:"isLearner"`
	ClientURLs []string `json:"clientURLs"`
}

// etcdctl runs the image's etcdctl in master's body, with the client
// credential the agent keeps there.
func (l *labUnderTest) etcdctl(t *testing.T, master v1.ClusterNode, args ...string) ([]byte, error) {
	t.Helper()
	ca, cert, key := etcd.ClientCredentials()
	argv := append([]string{"etcdctl", "--endpoints=https://" + master.IP + ":2379", "--cacert=" + ca, "--cert=" + cert, "--key=" + key,
		"--command-timeout=10s", "-w", "json"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return l.body(t, master.Name).Output(ctx, argv...)
}

func (l *labUnderTest) members(t *testing.T, via v1.ClusterNode) ([]etcdctlMember, error) {
	out, err := l.etcdctl(t, via, "member", "list")
	if err != nil {
		return nil, err
	}
	var res struct {
		Members []etcdctlMember `json:"members"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("etcdctl member list: %w: %s", err, out)
	}
	return res.Members, nil
}

// checkMembers: etcd's member list is exactly masters, none a learner,
// and every member answers healthy.
func (l *labUnderTest) checkMembers(t *testing.T, masters []v1.ClusterNode) {
	var want []string
	for _, m := range masters {
		want = append(want, m.Name)
	}
	slices.Sort(want)
	var got []string
	var detail string
	testutil.Eventually(t, 2*time.Minute, "etcd members = "+strings.Join(want, ","), func() bool {
		members, err := l.members(t, masters[0])
		if err != nil {
			detail = err.Error()
			return false
		}
		got = got[:0]
		for _, m := range members {
			if m.IsLearner {
				detail = fmt.Sprintf("%s is still a learner", m.Name)
				return false
			}
			got = append(got, m.Name)
		}
		slices.Sort(got)
		detail = fmt.Sprint("members ", got)
		return slices.Equal(got, want)
	}, func() { t.Log(detail) })
	out, err := l.etcdctl(t, masters[0], "endpoint", "health", "--cluster")
	if err != nil {
		t.Fatalf("etcdctl endpoint health: %v\n%s", err, out)
	}
	var health []struct {
		Endpoint string `json:"endpoint"`
		Health   bool   `json:"health"`
	}
	if err := json.Unmarshal(out, &health); err != nil || len(health) != len(want) {
		t.Fatalf("endpoint health: %v: %s", err, out)
	}
	for _, h := range health {
		if !h.Health {
			t.Errorf("etcd endpoint %s unhealthy", h.Endpoint)
		}
	}
}

// checkEtcdSnapshots: each master's agent has taken its first etcd
// snapshot (at once, by the default schedule) and reports it; the file is
// private, on the data disk, and one that etcdctl reads, holding keys.
func (l *labUnderTest) checkEtcdSnapshots(t *testing.T) {
	dir := etcd.DefaultDataDir + "/" + etcd.SnapshotDir
	for _, m := range l.masters(t) {
		testutil.Eventually(t, 2*time.Minute, m.Name+" reports an etcd snapshot", func() bool {
			for _, n := range l.cluster(t).Status.Nodes {
				if n.Name == m.Name {
					return n.EtcdSnapshotAt != nil
				}
			}
			return false
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := l.body(t, m.Name).Output(ctx, "sh", "-c", "stat -c '%a %n' "+dir+"/snapshot-*.db")
		cancel()
		if err != nil {
			t.Fatalf("%s: the snapshots in %s: %v: %s", m.Name, dir, err, out)
		}
		first := strings.Fields(strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0])
		if len(first) != 2 || first[0] != "600" {
			t.Fatalf("%s: %q, want snapshots with mode 600", m.Name, out)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		out, err = l.body(t, m.Name).Output(ctx, "etcdctl", "-w", "json", "snapshot", "status", first[1])
		cancel()
		var status struct {
			TotalKey int `json:"totalKey"`
		}
		if err != nil || json.Unmarshal(out, &status) != nil || status.TotalKey == 0 {
			t.Errorf("%s: etcdctl snapshot status %s: %v: %s", m.Name, first[1], err, out)
		}
	}

	// One of them reached the controller over the agent's mTLS session,
	// byte for byte, off the masters' datastore.
	var copied v1.EtcdSnapshotCopy
	testutil.Eventually(t, 2*time.Minute, "the controller keeping a copy of a master's snapshot", func() bool {
		copies := l.cluster(t).Status.EtcdSnapshotCopies
		if len(copies) > 0 {
			copied = copies[len(copies)-1]
		}
		return len(copies) > 0
	})
	if held := l.holdingCopy(t, copied, l.masters(t)); len(held) == 0 {
		t.Errorf("no master holds the controller's copy of %s", copied.TakenAt.Format(time.RFC3339))
	}
}

// holdingCopy lists the masters, of those given, whose data disk holds
// the controller's copy byte for byte (sha256 inside the VM body).
func (l *labUnderTest) holdingCopy(t *testing.T, copied v1.EtcdSnapshotCopy, masters []v1.ClusterNode) []string {
	t.Helper()
	name := etcdsnapshot.Name(copied.TakenAt)
	files, err := filepath.Glob(filepath.Join(l.stateDir, "controller", etcdcopies.Dir, lab.ClusterName+"-*", name))
	if err != nil || len(files) != 1 {
		t.Fatalf("the controller's copy %s: %v, %v", name, files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil || int64(len(data)) != copied.Bytes {
		t.Fatalf("the controller's copy %s: %d bytes, %v; its view says %d", files[0], len(data), err, copied.Bytes)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(data))
	var held, sums []string
	for _, m := range masters {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, _ := l.body(t, m.Name).Output(ctx, "sh", "-c", "sha256sum "+etcd.DefaultDataDir+"/"+etcd.SnapshotDir+"/"+name+" 2>/dev/null || true")
		cancel()
		sums = append(sums, m.Name+": "+strings.TrimSpace(string(out)))
		if strings.HasPrefix(string(out), sum+" ") {
			held = append(held, m.Name)
		}
	}
	t.Logf("the controller's copy %s (sha256 %s) on the masters: %q", name, sum, sums)
	return held
}

// checkPrometheus: Prometheus scrapes the cluster's nodes as they are now
// (found through the controller: after scaling or an upgrade too) and the
// controller, and evaluates the alerting rules without an error, and
// every metric they name is exported.
func (l *labUnderTest) checkPrometheus(t *testing.T) {
	type target struct {
		Labels    map[string]string `json:"labels"`
		Health    string            `json:"health"`
		LastError string            `json:"lastError"`
	}
	want := l.names()
	slices.Sort(want)
	var detail string
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("Prometheus sees the controller and exactly the agents of %q up", want), func() bool {
		var targets struct {
			Data struct {
				ActiveTargets []target `json:"activeTargets"`
			} `json:"data"`
		}
		if err := testutil.PrometheusAPI(context.Background(), l.sum.Prometheus, "targets?state=active", &targets); err != nil {
			detail = err.Error()
			return false
		}
		var b strings.Builder
		var agents []string
		controllers := 0
		for _, tg := range targets.Data.ActiveTargets {
			fmt.Fprintf(&b, "%s %s %s %s %s\n", tg.Labels["job"], tg.Labels["instance"], tg.Labels["node"], tg.Health, tg.LastError)
			if tg.Health != "up" {
				continue
			}
			switch tg.Labels["job"] {
			case "harmony-agent":
				agents = append(agents, tg.Labels["node"])
			case "harmony-controller":
				controllers++
			}
		}
		detail = b.String()
		slices.Sort(agents)
		return slices.Equal(agents, want) && controllers == 1 && len(targets.Data.ActiveTargets) == len(want)+1
	}, func() { t.Log(detail) })

	n, unhealthy, err := testutil.PrometheusRules(context.Background(), l.sum.Prometheus)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || len(unhealthy) > 0 {
		t.Errorf("Prometheus has %d alerting rules, these not evaluated healthy: %q", n, unhealthy)
	}
	var names struct {
		Data []string `json:"data"`
	}
	if err := testutil.PrometheusAPI(context.Background(), l.sum.Prometheus, "label/__name__/values", &names); err != nil {
		t.Fatal(err)
	}
	for _, name := range append(testutil.RuleMetrics(t, "harmony_agent_"), testutil.RuleMetrics(t, "harmony_controller_")...) {
		if !slices.Contains(names.Data, name) {
			t.Errorf("the alerting rules name %s, which no agent or controller exports", name)
		}
	}
}

// holders lists the masters whose eth0 is up and carries the VIP.
func (l *labUnderTest) holders(t *testing.T) []v1.ClusterNode {
	var out []v1.ClusterNode
	for _, m := range l.masters(t) {
		netns := l.vm(t, m.Name).Netns
		got, err := exec.Command("ip", "-n", netns, "-o", "-4", "addr", "show", "dev", "eth0", "up").CombinedOutput()
		if err != nil {
			continue // powered off: no namespace
		}
		if strings.Contains(string(got), " "+l.sum.VIP+"/") {
			out = append(out, m)
		}
	}
	return out
}

func (l *labUnderTest) readyz(t *testing.T) bool {
	// Short: an attempt that hangs on the dead holder must not hide the
	// moment the VIP answers again.
	resp, err := l.kubeClient(t, time.Second).Get(l.sum.APIServer + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitComponent waits until node reports, after since and for the role
// revision it has, component comp in phase and healthy.
func (l *labUnderTest) waitComponent(t *testing.T, node, comp, phase string, since time.Time, timeout time.Duration) {
	t.Helper()
	var last string
	testutil.Eventually(t, timeout, node+" "+comp+" "+phase, func() bool {
		n, err := l.ctl.Node(context.Background(), node)
		if err != nil || n.Status == nil {
			return false
		}
		if n.Status.ObservedRevision != n.RoleRevision || n.Status.ReportedAt.Before(since) {
			last = fmt.Sprintf("status of revision %d at %s, role at %d", n.Status.ObservedRevision, n.Status.ReportedAt, n.RoleRevision)
			return false
		}
		for _, c := range n.Status.Components {
			if c.Name == comp {
				last = fmt.Sprintf("%s healthy=%v: %s", c.Phase, c.Healthy, c.Message)
				return c.Phase == phase && c.Healthy
			}
		}
		return false
	}, func() { t.Log(last) })
}

func (l *labUnderTest) memberID(t *testing.T, via v1.ClusterNode, name string) uint64 {
	t.Helper()
	members, err := l.members(t, via)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Name == name {
			return m.ID
		}
	}
	t.Fatalf("no etcd member %s in %+v", name, members)
	return 0
}

// checkFailover powers the VIP holder off through vCenter, as a user
// would with govc: the VIP moves and the API answers through it again;
// powered on, the master comes back as the same etcd member.
func (l *labUnderTest) checkFailover(t *testing.T) {
	var holders []v1.ClusterNode
	testutil.Eventually(t, time.Minute, "exactly one VIP holder", func() bool {
		holders = l.holders(t)
		return len(holders) == 1
	}, func() { t.Logf("holders %+v", holders) })
	holder := holders[0]
	var other v1.ClusterNode
	for _, m := range l.masters(t) {
		if m.Name != holder.Name {
			other = m
		}
	}
	id := l.memberID(t, other, holder.Name)
	testutil.Eventually(t, time.Minute, "readyz through the VIP before the failover", func() bool { return l.readyz(t) })

	vm := l.vm(t, holder.Name)
	off := time.Now()
	if err := vm.Power(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "readyz through the VIP after the failover", func() bool { return l.readyz(t) })
	gap := time.Since(off)
	var now []v1.ClusterNode
	testutil.Eventually(t, 30*time.Second, "one new VIP holder", func() bool {
		now = l.holders(t)
		return len(now) == 1 && now[0].Name != holder.Name
	}, func() { t.Logf("holders after powering off %s: %+v", holder.Name, now) })
	t.Logf("VIP moved %s -> %s; /readyz through the VIP answered again %s after power-off", holder.Name, now[0].Name, gap.Round(10*time.Millisecond))

	on := time.Now()
	if err := vm.Power(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	l.waitComponent(t, holder.Name, "etcd", "Converged", on, 4*time.Minute)
	// Its apiserver and kubelet too, or a later test meets a master
	// that never came back, far from the power cycle that broke it.
	l.waitComponent(t, holder.Name, kubeadm.Name, "Converged", on, 4*time.Minute)
	if got := l.memberID(t, other, holder.Name); got != id {
		t.Errorf("%s came back as etcd member %x, was %x", holder.Name, got, id)
	}
	if n, err := l.ctl.Node(context.Background(), holder.Name); err != nil || n.Status.EtcdMemberID != strconv.FormatUint(id, 16) {
		t.Errorf("%s reports etcd member %v, want %x (%v)", holder.Name, n.Status.EtcdMemberID, id, err)
	}
	testutil.Eventually(t, 60*time.Second, "exactly one VIP holder after the old holder is back",
		func() bool { return len(l.holders(t)) == 1 }, func() { t.Logf("holders %+v", l.holders(t)) })
}

// waitOperation waits for a cluster operation and fails the test unless
// it succeeded.
func (l *labUnderTest) waitOperation(t *testing.T, op *v1.Operation, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	done, err := l.ctl.WaitOperation(ctx, op.ID, nil)
	if err != nil {
		t.Fatalf("operation %s: %v", op.ID, err)
	}
	if done.State != v1.OperationSucceeded {
		t.Fatalf("operation %s %s: %s", done.Kind, done.State, done.Message)
	}
}

// checkVMGone: the VM is gone from vCenter, and so are its body and its
// namespace.
func (l *labUnderTest) checkVMGone(t *testing.T, name string) {
	vm := l.vm(t, name)
	testutil.Eventually(t, 30*time.Second, name+"'s body and namespace gone", func() bool {
		_, err := vm.Body()
		return err != nil && !netnsExists(vm.Netns)
	})
	if ok, err := vm.Exists(context.Background()); err != nil || ok {
		t.Errorf("VM %s still in vCenter (%v)", name, err)
	}
}

func (l *labUnderTest) checkRemoveWorker(t *testing.T) {
	var worker string
	for _, n := range l.cluster(t).Status.Nodes {
		if n.Role == v1.RoleWorker {
			worker = n.Name
		}
	}
	pods := l.netexecPods(t)
	op, err := l.ctl.RemoveClusterNode(context.Background(), lab.ClusterName, worker, false)
	l.waitOperation(t, op, err)
	l.checkDrainedBeforePowerOff(t, worker, pods)
	// It drained itself before it left: its Node was cordoned.
	for _, n := range l.kubeNodes(t) {
		if n.Metadata.Name == worker && !n.Spec.Unschedulable {
			t.Errorf("%s left without being cordoned: %+v", worker, n)
		}
	}
	for _, n := range l.cluster(t).Status.Nodes {
		if n.Name == worker {
			t.Errorf("%s still in the cluster: %+v", worker, n)
		}
	}
	if _, err := l.ctl.Node(context.Background(), worker); err == nil {
		t.Errorf("the controller still knows node %s", worker)
	}
	l.checkVMGone(t, worker)
}

func (l *labUnderTest) checkScaleMasters(t *testing.T) {
	before := l.masters(t)
	scale := func(n int) {
		op, err := l.ctl.ScaleCluster(context.Background(), lab.ClusterName, v1.ScaleRequest{Masters: &n})
		l.waitOperation(t, op, err)
		// Generous: a join under CI's load can be retried several times
		// (a second learner waits for the first to be promoted; kubeadm's
		// preflight fails until the first-boot image import is done).
		testutil.Eventually(t, 15*time.Minute, fmt.Sprintf("%d masters Ready", n), func() bool {
			ms := l.masters(t)
			ready := 0
			for _, m := range ms {
				if m.Phase == "Ready" {
					ready++
				}
			}
			return len(ms) == n && ready == n
		}, func() {
			t.Logf("masters %+v", l.masters(t))
			dumpLabLogs(t, l.stateDir) // the agents' journals say why a master is not Ready
		})
		l.checkMembers(t, l.masters(t))
	}
	scale(5)
	grown := l.masters(t)
	// One of the two masters the scale-in removes (the newest) is lost
	// first: powered off, it cannot leave, and its etcd member would stay,
	// counted against the quorum, had the remaining masters not removed
	// it (etcd.removeMembers). checkMembers wants exactly three.
	var added []string
	for _, m := range grown {
		if !slices.ContainsFunc(before, func(n v1.ClusterNode) bool { return n.Name == m.Name }) {
			added = append(added, m.Name)
		}
	}
	slices.Sort(added)
	if len(added) != 2 {
		t.Fatalf("masters added by the scale to five: %q", added)
	}
	if err := l.vm(t, added[0]).Power(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s powered off before the scale-in, which removes it and %s", added[0], added[1])
	scale(3)
	for _, m := range grown {
		if !slices.ContainsFunc(l.masters(t), func(n v1.ClusterNode) bool { return n.Name == m.Name }) {
			l.checkVMGone(t, m.Name)
		}
	}
	if got := l.masters(t); len(got) != len(before) {
		t.Errorf("masters after 3 -> 5 -> 3: %+v", got)
	}
	testutil.Eventually(t, time.Minute, "readyz through the VIP after the scale", func() bool { return l.readyz(t) })
}

// checkReplaceMaster: a master whose VM broke (powered off, as a guest
// that no longer boots) is replaced with replace-node by a new VM of the
// same name, which boots from the node image onto the old data disk and
// serves as the same etcd member.
func (l *labUnderTest) checkReplaceMaster(t *testing.T) {
	ctx := context.Background()
	masters := l.masters(t)
	broken, other := masters[len(masters)-1], masters[0]
	id := l.memberID(t, other, broken.Name)
	if err := l.vm(t, broken.Name).Power(ctx, false); err != nil {
		t.Fatal(err)
	}
	op, err := l.ctl.ReplaceClusterNode(ctx, lab.ClusterName, broken.Name, v1.ReplaceNodeRequest{})
	l.waitOperation(t, op, err)
	var now v1.ClusterNode
	for _, m := range l.masters(t) {
		if m.Name == broken.Name {
			now = m
		}
	}
	if now.VM == "" || now.VM == broken.VM || now.DataDisk != broken.DataDisk || now.Phase != "Ready" {
		t.Errorf("%s after its replacement: VM %q (was %s), data disk %q (was %q), phase %s", broken.Name, now.VM, broken.VM, now.DataDisk, broken.DataDisk, now.Phase)
	}
	l.checkMembers(t, l.masters(t))
	if got := l.memberID(t, other, broken.Name); got != id {
		t.Errorf("%s came back as etcd member %x, was %x", broken.Name, got, id)
	}
	testutil.Eventually(t, time.Minute, "readyz through the VIP after the replacement", func() bool { return l.readyz(t) })
}

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

// checkNothingLeft: after lab down, no namespace of the lab, no process
// started from its state directory, no mount under it, and the directory
// itself (which Up made) is gone.
func checkNothingLeft(t *testing.T, stateDir, netnsPrefix string, vms []string) {
	t.Helper()
	if netnsPrefix != "" {
		entries, _ := os.ReadDir("/run/netns")
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), netnsPrefix) {
				t.Errorf("namespace %s left behind", e.Name())
			}
		}
	}
	for _, name := range vms {
		if _, err := os.Stat(filepath.Join("/run/systemd/nspawn/propagate", name)); err == nil {
			t.Errorf("nspawn's directory for %s left behind", name)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && bytes.Contains(cmdline, []byte(stateDir)) {
			t.Errorf("process %s left behind: %s", filepath.Base(filepath.Dir(p)), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
	if mounts, err := body.MountsUnder(stateDir); err != nil || len(mounts) > 0 {
		t.Errorf("mounts left under %s: %v %v", stateDir, mounts, err)
	}
	if _, err := os.Stat(stateDir); err == nil {
		t.Errorf("state dir %s left behind", stateDir)
	}
}

// bodyLogs are what dumpLabLogs reads in each running body: the agent's
// journal, and for a master whose apiserver is down the kubelet's and
// the apiserver's own log, which say why (CI once had one stay down
// after a restore, with only the agent's word for it).
var bodyLogs = []struct {
	title string
	argv  []string
}{
	{"journalctl -u harmony-agent", []string{"journalctl", "-u", "harmony-agent", "-n", "30", "--no-pager"}},
	{"journalctl -u kubelet", []string{"journalctl", "-u", "kubelet", "-n", "20", "--no-pager"}},
	{"kube-apiserver's container log", []string{"sh", "-c", "tail -n 15 /var/log/pods/kube-system_kube-apiserver-*/kube-apiserver/*.log 2>&1"}},
}

func dumpLabLogs(t *testing.T, stateDir string) {
	files, _ := filepath.Glob(filepath.Join(stateDir, "logs", "*.log"))
	consoles, _ := filepath.Glob(filepath.Join(stateDir, "vms", "*", "body", "console.log"))
	for _, f := range append(files, consoles...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		rel, _ := filepath.Rel(stateDir, f)
		t.Logf("--- %s (tail)\n%s", rel, tail(string(data), 25))
	}
	// The agents log to the bodies' journals.
	vms, _ := filepath.Glob(filepath.Join(stateDir, "vms", "*"))
	for _, dir := range vms {
		b, err := body.Open(filepath.Join(dir, "body"), nil)
		if err != nil || !b.Running() {
			continue
		}
		for _, l := range bodyLogs {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, _ := b.Output(ctx, l.argv...)
			cancel()
			t.Logf("--- %s: %s (tail)\n%s", filepath.Base(dir), l.title, out)
		}
	}
}
