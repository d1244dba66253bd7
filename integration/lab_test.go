package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/integration/lab"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// labSubnet keeps the test's lab apart from a user's (198.18.100.0/24).
var labSubnet = netip.MustParsePrefix("198.18.110.0/24")

// TestLab builds the whole node-stack lab (3 masters, 1 worker, real
// controller, agents, keepalived, HAProxy, etcd, kubeadm, kube-apiserver
// and Prometheus) and proves the claims against it, in order.
func TestLab(t *testing.T) {
	k8sBin := os.Getenv("HARMONY_K8S_BIN")
	if k8sBin == "" {
		t.Fatal("HARMONY_K8S_BIN is not set: run the tests with make test (make kubernetes builds kubeadm and kube-apiserver)")
	}
	stateDir := filepath.Join(t.TempDir(), "lab")
	logs := &testutil.LogBuffer{}
	ctx := context.Background()
	t.Cleanup(func() {
		if t.Failed() {
			dumpLabLogs(t, stateDir)
		}
		if err := lab.Down(context.Background(), stateDir, nil); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	start := time.Now()
	sum, err := lab.Up(ctx, lab.Config{
		StateDir: stateDir, Masters: 3, Workers: 1, Subnet: labSubnet,
		BinDir: binaries(t), KubernetesBinDir: k8sBin, Timeout: 6 * time.Minute,
		Log: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Logf("lab log:\n%s", logs.String())
		t.Fatalf("lab up: %v", err)
	}
	t.Logf("lab converged in %s", time.Since(start).Round(100*time.Millisecond))
	l := &labUnderTest{t: t, sum: sum, stateDir: stateDir, ctl: labController(t, stateDir)}

	t.Run("summary", l.checkSummary)
	t.Run("exactly one VIP holder", l.checkOneHolder)
	t.Run("prometheus scrapes every agent", l.checkPrometheus)
	t.Run("role change restarts only what changed", l.checkRoleChange)
	t.Run("broken role refused, old config runs", l.checkBrokenRole)
	t.Run("etcd keeps quorum and a master rejoins with its data", l.checkEtcdRejoin)
	t.Run("wiped master rejoins as a learner", l.checkEtcdLearner)
	t.Run("VIP failover", l.checkFailover)
}

type labUnderTest struct {
	t        *testing.T
	sum      *lab.Summary
	stateDir string
	ctl      *client.Client
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

func (l *labUnderTest) masters() []lab.HostSummary {
	return slices.DeleteFunc(slices.Clone(l.sum.Hosts), func(h lab.HostSummary) bool { return h.Role != "master" })
}

func (l *labUnderTest) host(name string) lab.HostSummary {
	for _, h := range l.sum.Hosts {
		if h.Name == name {
			return h
		}
	}
	l.t.Fatalf("no host %s", name)
	return lab.HostSummary{}
}

func (l *labUnderTest) checkSummary(t *testing.T) {
	s := l.sum
	if len(s.Hosts) != 4 || len(l.masters()) != 3 {
		t.Fatalf("hosts %+v", s.Hosts)
	}
	for _, h := range s.Hosts {
		a, err := netip.ParseAddr(h.IP)
		if err != nil || !labSubnet.Contains(a) || h.Netns == "" {
			t.Errorf("host %+v: address outside %s or no namespace", h, labSubnet)
		}
	}
	if s.VIP != "198.18.110.10" || s.APIServer != "https://198.18.110.10:8443" {
		t.Errorf("vip %s apiserver %s", s.VIP, s.APIServer)
	}
	if len(s.Etcd.Endpoints) != 3 || s.Controller == "" || s.Prometheus == "" {
		t.Errorf("summary %+v", s)
	}
	for _, p := range []string{s.Kubeconfig, s.Etcd.CA, s.Etcd.Cert, s.Etcd.Key} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("summary names %s: %v", p, err)
		}
	}
	if info, err := os.Stat(s.Kubeconfig); err == nil && info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600", info.Mode().Perm())
	}
	// The admin credential works through the VIP: the apiserver, its
	// external etcd and the cluster CA all agree.
	resp := l.kubeGet(t, "/api/v1/namespaces/default")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET default namespace through the VIP: %s", resp.Status)
	}
}

// kubeGet calls the apiserver through the VIP with the lab's admin
// credential. A request that gets no answer is tried again for up to a
// minute: right after convergence, on a loaded 2-core machine (make test
// runs packages side by side), the first answer can take longer than one
// try's timeout. An answer, whatever its status, is returned at once.
func (l *labUnderTest) kubeGet(t *testing.T, path string) *http.Response {
	t.Helper()
	dir := filepath.Join(filepath.Dir(l.sum.Kubeconfig), "kubernetes")
	c := mtlsClient(t, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "lab-admin.crt"), filepath.Join(dir, "lab-admin.key"))
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := c.Get(l.sum.APIServer + path)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", path, err)
		}
		t.Logf("GET %s: %v; trying again", path, err)
		time.Sleep(time.Second)
	}
}

func mtlsClient(t *testing.T, caFile, certFile, keyFile string) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conf := &tls.Config{RootCAs: pool}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, DisableKeepAlives: true}}
}

// holders lists the masters whose eth0 is up and carries the VIP: a
// powered-off host (link down) holds nothing, whatever its address list.
func (l *labUnderTest) holders(t *testing.T) []string {
	var out []string
	for _, h := range l.masters() {
		got, err := exec.Command("ip", "-n", h.Netns, "-o", "-4", "addr", "show", "dev", "eth0", "up").CombinedOutput()
		if err != nil {
			t.Fatalf("ip addr in %s: %v: %s", h.Netns, err, got)
		}
		if strings.Contains(string(got), " "+l.sum.VIP+"/") {
			out = append(out, h.Name)
		}
	}
	return out
}

func (l *labUnderTest) checkOneHolder(t *testing.T) {
	// Right after convergence the preferred master (rank 0) may still be
	// taking the VIP over from whoever won the first election: wait for
	// one holder that the agents' own metrics agree on.
	var seen string
	testutil.Eventually(t, 60*time.Second, "exactly one VIP holder, reported by the agents", func() bool {
		holders := l.holders(t)
		seen = fmt.Sprint("holders by ip addr: ", holders)
		if len(holders) != 1 {
			return false
		}
		for _, h := range l.masters() {
			want := "0"
			if h.Name == holders[0] {
				want = "1"
			}
			got := metricValue(t, l.agentMetrics(t, h), `harmony_agent_vip_held{vip="`+l.sum.VIP+`"}`)
			seen += fmt.Sprintf("; %s reports %q", h.Name, got)
			if got != want {
				return false
			}
		}
		return true
	}, func() { t.Log(seen) })
}

// agentMetrics scrapes an agent as Prometheus does.
func (l *labUnderTest) agentMetrics(t *testing.T, h lab.HostSummary) string {
	t.Helper()
	dir := filepath.Join(l.stateDir, "prometheus")
	c := mtlsClient(t, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "scraper.crt"), filepath.Join(dir, "scraper.key"))
	resp, err := c.Get("https://" + h.IP + ":9101/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", h.Name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", h.Name, resp.Status)
	}
	return string(body)
}

// metricValue returns the value of the series written exactly as series.
func metricValue(t *testing.T, exposition, series string) string {
	t.Helper()
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

func (l *labUnderTest) checkPrometheus(t *testing.T) {
	type target struct {
		Labels    map[string]string `json:"labels"`
		Health    string            `json:"health"`
		LastError string            `json:"lastError"`
	}
	var targets struct {
		Data struct {
			ActiveTargets []target `json:"activeTargets"`
		} `json:"data"`
	}
	up := func() (agents, controllers int, detail string) {
		resp, err := http.Get(l.sum.Prometheus + "/api/v1/targets?state=active")
		if err != nil {
			return 0, 0, err.Error()
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&targets); err != nil {
			return 0, 0, err.Error()
		}
		var b strings.Builder
		for _, tg := range targets.Data.ActiveTargets {
			fmt.Fprintf(&b, "%s %s %s %s\n", tg.Labels["job"], tg.Labels["instance"], tg.Health, tg.LastError)
			if tg.Health != "up" {
				continue
			}
			switch tg.Labels["job"] {
			case "harmony-agent":
				agents++
			case "harmony-controller":
				controllers++
			}
		}
		return agents, controllers, b.String()
	}
	var detail string
	testutil.Eventually(t, 90*time.Second, "Prometheus sees every agent and the controller up", func() bool {
		var a, c int
		a, c, detail = up()
		return a == len(l.sum.Hosts) && c == 1
	}, func() { t.Log(detail) })

	// promtool finds nothing to fix in what an agent exposes.
	exposition := l.agentMetrics(t, l.masters()[0])
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	for _, name := range []string{"harmony_agent_component_up", "harmony_agent_reconcile_duration_seconds_bucket",
		"harmony_agent_etcd_member_info", "harmony_agent_vip_held"} {
		if !strings.Contains(exposition, name) {
			t.Errorf("agent metrics lack %s", name)
		}
	}
}

// daemonProc is a daemon process of a host.
type daemonProc struct {
	pid   int
	start uint64
}

// daemon finds the process the host's service supervisor runs as unit,
// from the supervisor's pid file, with its start time.
func (l *labUnderTest) daemon(t *testing.T, h lab.HostSummary, unit string) (daemonProc, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(h.Root, "run", "harmony", "services", unit+".pid"))
	if err != nil {
		return daemonProc{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return daemonProc{}, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return daemonProc{}, false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	start, _ := strconv.ParseUint(fields[19], 10, 64)
	return daemonProc{pid: pid, start: start}, true
}

// daemons records every daemon of every master.
func (l *labUnderTest) daemons(t *testing.T) map[string]daemonProc {
	out := map[string]daemonProc{}
	for _, h := range l.masters() {
		for _, b := range []string{"keepalived", "haproxy", "etcd", "kube-apiserver"} {
			p, ok := l.daemon(t, h, b)
			if !ok {
				t.Fatalf("%s: no %s process", h.Name, b)
			}
			out[h.Name+"/"+b] = p
		}
	}
	return out
}

func (l *labUnderTest) roles(t *testing.T) []v1.Role {
	var out []v1.Role
	for _, h := range l.sum.Hosts {
		var r v1.Role
		if err := l.ctl.Do(context.Background(), "GET", client.NodePath(h.Name, "/role"), nil, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func (l *labUnderTest) setRoles(t *testing.T, rs []v1.Role) {
	t.Helper()
	if err := l.ctl.Do(context.Background(), "PUT", v1.PathRoles, v1.RoleList{Items: rs}, nil); err != nil {
		t.Fatal(err)
	}
}

// waitComponent waits until node reports, after since and for the role
// revision it has, component comp in phase (and healthy, unless Failed).
func (l *labUnderTest) waitComponent(t *testing.T, node, comp, phase string, since time.Time, timeout time.Duration) {
	t.Helper()
	var last string
	testutil.Eventually(t, timeout, node+" "+comp+" "+phase, func() bool {
		var n v1.Node
		if err := l.ctl.Do(context.Background(), "GET", client.NodePath(node, ""), nil, &n); err != nil || n.Status == nil {
			return false
		}
		if n.Status.ObservedRevision != n.RoleRevision || n.Status.ReportedAt.Before(since) {
			last = fmt.Sprintf("status of revision %d at %s, role at %d", n.Status.ObservedRevision, n.Status.ReportedAt, n.RoleRevision)
			return false
		}
		for _, c := range n.Status.Components {
			if c.Name == comp {
				last = fmt.Sprintf("%s healthy=%v: %s", c.Phase, c.Healthy, c.Message)
				return c.Phase == phase && (c.Healthy || phase == "Failed")
			}
		}
		return false
	}, func() { t.Log(last) })
}

// haproxyDuration is 5h as the HAProxy component writes it.
const haproxyDuration = "5h"

func (l *labUnderTest) checkRoleChange(t *testing.T) {
	before := l.daemons(t)
	cfgPath := filepath.Join(l.host("m1").Root, "etc", "haproxy", "haproxy.cfg")
	oldCfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	rs := l.roles(t)
	for i := range rs {
		rs[i].Cluster.LoadBalancer.ClientTimeout = "5h"
	}
	changed := time.Now()
	l.setRoles(t, rs)
	testutil.Eventually(t, 60*time.Second, "m1's HAProxy config with the new timeout", func() bool {
		data, _ := os.ReadFile(cfgPath)
		return !bytes.Equal(data, oldCfg) && strings.Contains(string(data), "timeout client "+haproxyDuration)
	}, func() { data, _ := os.ReadFile(cfgPath); t.Log(string(data)) })
	for _, h := range l.sum.Hosts {
		l.waitComponent(t, h.Name, "haproxy", map[string]string{"master": "Converged", "worker": "Disabled"}[h.Role], changed, 60*time.Second)
	}
	after := l.daemons(t)
	// HAProxy reloads in place (its master process stays); nothing else
	// restarts.
	for key, p := range before {
		if after[key] != p {
			t.Errorf("%s restarted (pid %d -> %d) for a change that was not its", key, p.pid, after[key].pid)
		}
	}
}

func (l *labUnderTest) checkBrokenRole(t *testing.T) {
	m2 := l.host("m2")
	cfgDir := filepath.Join(m2.Root, "etc", "harmony", "kubeadm")
	snapshot := readDir(t, cfgDir)
	apiserver, ok := l.daemon(t, m2, "kube-apiserver")
	if !ok {
		t.Fatal("m2 runs no kube-apiserver")
	}
	rs := l.roles(t)
	var good v1.Role
	for _, r := range rs {
		if r.NodeName == "m2" {
			good = r
		}
	}
	// api/v1 accepts any version; kubeadm refuses one this old.
	broken := good
	broken.Cluster.KubernetesVersion = "v1.20.0"
	l.setRoles(t, []v1.Role{broken})
	l.waitComponent(t, "m2", "kubeadm", "Failed", time.Time{}, 90*time.Second)
	if got := readDir(t, cfgDir); !maps2Equal(got, snapshot) {
		t.Error("a refused kubeadm config replaced the old one")
	}
	if p, ok := l.daemon(t, m2, "kube-apiserver"); !ok || p != apiserver {
		t.Errorf("kube-apiserver restarted for a refused role: %+v -> %+v", apiserver, p)
	}
	l.setRoles(t, []v1.Role{good})
	l.waitComponent(t, "m2", "kubeadm", "Converged", time.Time{}, 90*time.Second)
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(data)
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no files", dir)
	}
	return out
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// etcdMember is one member as etcd's JSON gateway lists it.
type etcdMember struct {
	ID        string `json:"ID"`
	Name      string `json:"name"`
	IsLearner bool   `json:"isLearner"`
}

// etcdCall posts to etcd's v3 JSON gateway on endpoint with the lab's
// etcd client credential.
func (l *labUnderTest) etcdCall(endpoint, path string, body, out any) error {
	c := mtlsClient(l.t, l.sum.Etcd.CA, l.sum.Etcd.Cert, l.sum.Etcd.Key)
	data, _ := json.Marshal(body)
	resp, err := c.Post(endpoint+path, "application/json", bytes.NewReader(data))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s: %s: %s", endpoint, path, resp.Status, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func (l *labUnderTest) members(endpoint string) ([]etcdMember, error) {
	var res struct {
		Members []etcdMember `json:"members"`
	}
	err := l.etcdCall(endpoint, "/v3/cluster/member/list", struct{}{}, &res)
	return res.Members, err
}

func endpointOf(h lab.HostSummary) string { return "https://" + h.IP + ":2379" }

func memberID(members []etcdMember, name string) string {
	for _, m := range members {
		if m.Name == name {
			return m.ID
		}
	}
	return ""
}

func (l *labUnderTest) checkEtcdRejoin(t *testing.T) {
	m1, m3 := l.host("m1"), l.host("m3")
	members, err := l.members(endpointOf(m1))
	if err != nil || len(members) != 3 {
		t.Fatalf("members %+v, %v", members, err)
	}
	id := memberID(members, "m3")
	if id == "" {
		t.Fatalf("no member m3 in %+v", members)
	}
	if err := lab.StopHost(context.Background(), l.stateDir, "m3"); err != nil {
		t.Fatal(err)
	}
	// Two of three keep quorum: a write succeeds.
	put := map[string]string{"key": "aGFybW9ueQ==", "value": "cXVvcnVt"} // "harmony" = "quorum"
	testutil.Eventually(t, 30*time.Second, "a write with m3 down", func() bool {
		return l.etcdCall(endpointOf(m1), "/v3/kv/put", put, nil) == nil
	}, func() { t.Log(fmt.Sprint(l.etcdCall(endpointOf(m1), "/v3/kv/put", put, nil))) })

	restarted := time.Now()
	if err := lab.StartHost(context.Background(), l.stateDir, "m3"); err != nil {
		t.Fatal(err)
	}
	l.waitComponent(t, "m3", "etcd", "Converged", restarted, 2*time.Minute)
	var now []etcdMember
	testutil.Eventually(t, 60*time.Second, "m3 back with its member ID", func() bool {
		now, err = l.members(endpointOf(m3))
		return err == nil && len(now) == 3 && memberID(now, "m3") == id
	}, func() { t.Log(fmt.Sprintf("members %+v, %v; want m3 = %s", now, err, id)) })
	// The agent reports the same member ID to the controller.
	if got := l.statusMemberID(t, "m3"); got != hexID(t, id) {
		t.Errorf("m3's status names etcd member %q, want %s", got, hexID(t, id))
	}
}

// statusMemberID is the etcd member ID a node last reported.
func (l *labUnderTest) statusMemberID(t *testing.T, node string) string {
	var n v1.Node
	if err := l.ctl.Do(context.Background(), "GET", client.NodePath(node, ""), nil, &n); err != nil || n.Status == nil {
		t.Fatalf("node %s: %v", node, err)
	}
	return n.Status.EtcdMemberID
}

// hexID turns the gateway's decimal member ID into etcdctl's hex form.
func hexID(t *testing.T, decimal string) string {
	id, err := strconv.ParseUint(decimal, 10, 64)
	if err != nil {
		t.Fatalf("member ID %q: %v", decimal, err)
	}
	return strconv.FormatUint(id, 16)
}

func (l *labUnderTest) checkEtcdLearner(t *testing.T) {
	m1, m2 := l.host("m1"), l.host("m2")
	members, err := l.members(endpointOf(m1))
	if err != nil {
		t.Fatal(err)
	}
	oldID := memberID(members, "m2")
	if err := lab.StopHost(context.Background(), l.stateDir, "m2"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(m2.Root, "var", "lib", "etcd")); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := lab.StartHost(context.Background(), l.stateDir, "m2"); err != nil {
		t.Fatal(err)
	}
	var now []etcdMember
	testutil.Eventually(t, 3*time.Minute, "m2 rejoined as a new, promoted member", func() bool {
		now, err = l.members(endpointOf(m1))
		if err != nil || len(now) != 3 {
			return false
		}
		id := memberID(now, "m2")
		for _, m := range now {
			if m.IsLearner || m.ID == oldID {
				return false
			}
		}
		return id != "" && id != oldID
	}, func() { t.Log(fmt.Sprintf("members %+v, %v; old m2 = %s", now, err, oldID)) })
	l.waitComponent(t, "m2", "etcd", "Converged", restarted, 2*time.Minute)
	if got, want := l.statusMemberID(t, "m2"), hexID(t, memberID(now, "m2")); got != want {
		t.Errorf("m2's status names etcd member %q, want %s", got, want)
	}
}

func (l *labUnderTest) checkFailover(t *testing.T) {
	holders := l.holders(t)
	if len(holders) != 1 {
		t.Fatalf("holders %v", holders)
	}
	holder := holders[0]
	ready := func() bool {
		c := mtlsClient(t, filepath.Join(filepath.Dir(l.sum.Kubeconfig), "kubernetes", "ca.crt"), "", "")
		// Short: an attempt that hangs on the dead holder must not hide
		// the moment the VIP answers again.
		c.Timeout = 500 * time.Millisecond
		resp, err := c.Get(l.sum.APIServer + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	testutil.Eventually(t, 60*time.Second, "readyz through the VIP before the failover", ready)

	// The whole holder goes, as a powered-off VM.
	stopped := time.Now()
	if err := lab.StopHost(context.Background(), l.stateDir, holder); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "readyz through the VIP after the failover", ready)
	gap := time.Since(stopped)
	newHolders := l.holders(t)
	if len(newHolders) != 1 || newHolders[0] == holder {
		t.Fatalf("holders after stopping %s: %v", holder, newHolders)
	}
	t.Logf("VIP moved %s -> %s; /readyz through the VIP answered again %s after the host stopped", holder, newHolders[0], gap.Round(10*time.Millisecond))
	restarted := time.Now()
	if err := lab.StartHost(context.Background(), l.stateDir, holder); err != nil {
		t.Fatal(err)
	}
	l.waitComponent(t, holder, "keepalived", "Converged", restarted, 2*time.Minute)
	// Back, it does not take the VIP twice: exactly one holder again.
	testutil.Eventually(t, 30*time.Second, "exactly one VIP holder after the old holder is back",
		func() bool { return len(l.holders(t)) == 1 }, func() { t.Log("holders: ", l.holders(t)) })
}

func dumpLabLogs(t *testing.T, stateDir string) {
	files, _ := filepath.Glob(filepath.Join(stateDir, "hosts", "*", "var", "log", "harmony", "*.log"))
	more, _ := filepath.Glob(filepath.Join(stateDir, "logs", "*.log"))
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		rel, _ := filepath.Rel(stateDir, f)
		t.Logf("--- %s (tail)\n%s", rel, tail(string(data), 25))
	}
}
