package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/vsphere"
	htest "github.com/harmonykaas/harmony/internal/testutil"
	"github.com/harmonykaas/harmony/internal/vcsim"
)

// fleet stands in for the agents of a cluster's VMs, which cannot run
// inside this test (TestLab runs the real ones): each powered-on VM
// enrolls with the bootstrap in its guestinfo, as its agent would, and
// reports through its own certificate. A master's etcd member is its data
// disk's: the VM that has the disk attached reports that member, so that
// a replacement comes back as the same member only if the disk really
// moved. A node whose role says Leave reports Left; a VM of a bad image
// never gets Ready, and with refuse set says it never will. Meanwhile it
// checks that no data disk is ever on two VMs at once.
type fleet struct {
	e        *clusterEnv
	cluster  string
	badImage string
	pool     *x509.CertPool

	// refuse: a VM of badImage reports its kubeadm Refused, as an agent
	// whose image lacks the role's Kubernetes version does.
	refuse atomic.Bool
	// workersOnly: badImage fails as a worker only, so that its masters,
	// replaced first, pass and the surge workers are what fails.
	workersOnly atomic.Bool

	mu         sync.Mutex
	url        string                  // the controller's, which a restart changes
	admin      *http.Client            // to read node records
	agents     map[string]*http.Client // by VM reference
	handOvers  map[string]bool         // nodes whose role said HandOver
	order      []string                // the nodes that handed over, in order
	diskShared string                  // the first disk seen on two VMs
	stuck      map[string]bool         // leaving nodes whose pods cannot move
	held       map[string]bool         // nodes that report as a VM of badImage does, whatever their image
	silent     map[string]bool         // VMs (by reference) whose agents report nothing
	keepPods   map[string]bool         // leaving nodes whose role said KeepPods
	unsaved    map[string]bool         // masters whose etcd snapshots fail
	oldAgents  map[string]bool         // masters whose agents take no etcd snapshots
	saved      map[string]time.Time    // each master's newest etcd snapshot
	kept       map[string][]time.Time  // and all of them, oldest first
	// restored is the newest etcd restore each master did; unrestorable
	// masters cannot restore as a source; restoreOrder lists, in order,
	// each master's part of each restore done ("ID node").
	restored     map[string]string
	unrestorable map[string]bool
	restoreOrder []string
	// noCopies: masters whose agents do not fetch the controller's
	// snapshot copies; fetched is the copy each source fetched, and
	// toldToFetch the masters whose role said fromController.
	noCopies    map[string]bool
	fetched     map[string][]byte
	toldToFetch map[string]bool
	// copying: masters send their newest snapshot to the controller
	// when it takes it, as agents do (copy holds its bytes, sent when
	// each was last sent).
	copying  atomic.Bool
	copy     []byte
	sent     map[string]time.Time
	keptFrom map[time.Time]string // who sent the copy the controller kept
	stop     context.CancelFunc
	done     chan struct{}
	ticks    atomic.Int64 // ticks finished
}

// startFleet runs the agents of cluster's VMs; a VM of badImage (if set)
// never gets Ready.
func (e *clusterEnv) startFleet(cluster, badImage string) *fleet {
	ctx, cancel := context.WithCancel(context.Background())
	pool := x509.NewCertPool()
	pool.AddCert(e.tc.c.CA().Certificate())
	f := &fleet{e: e, cluster: cluster, badImage: badImage, pool: pool, url: e.tc.url, admin: e.tc.admin,
		agents: map[string]*http.Client{}, handOvers: map[string]bool{}, stuck: map[string]bool{}, held: map[string]bool{}, silent: map[string]bool{}, keepPods: map[string]bool{}, unsaved: map[string]bool{}, oldAgents: map[string]bool{}, saved: map[string]time.Time{}, kept: map[string][]time.Time{},
		restored: map[string]string{}, unrestorable: map[string]bool{},
		noCopies: map[string]bool{}, fetched: map[string][]byte{}, toldToFetch: map[string]bool{},
		copy: htest.EtcdSnapshot(e.t, 1), sent: map[string]time.Time{}, keptFrom: map[time.Time]string{},
		stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			f.tick()
			f.ticks.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	e.t.Cleanup(f.halt)
	return f
}

// follow points the fleet at a restarted controller (same data, same CA).
func (f *fleet) follow(tc *testController) {
	f.mu.Lock()
	f.url, f.admin = tc.url, tc.admin
	f.mu.Unlock()
}

func (f *fleet) halt() {
	f.stop()
	<-f.done
}

// call is a request that may fail (the controller restarting) without
// failing the test: the fleet tries again on its next tick.
func call(client *http.Client, method, url string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

// memberOf is the etcd member a data disk holds.
func memberOf(disk string) string {
	sum := sha256.Sum256([]byte(disk))
	return hex.EncodeToString(sum[:8])
}

func dataDiskOf(vm mo.VirtualMachine) string {
	for _, d := range object.VirtualDeviceList(vm.Config.Hardware.Device).SelectByType((*types.VirtualDisk)(nil)) {
		if name := diskFileName(d); strings.Contains(name, "harmony-data/") {
			return name
		}
	}
	return ""
}

func (f *fleet) tick() {
	vms, err := f.e.readVMs(f.cluster)
	if err != nil {
		return // a VM went while it was read: the next tick sees the folder settled
	}
	f.mu.Lock()
	url := f.url
	f.mu.Unlock()
	users := map[string]int{}
	for name, vm := range vms {
		if disk := dataDiskOf(vm); disk != "" {
			users[disk]++
			if users[disk] > 1 {
				f.mu.Lock()
				if f.diskShared == "" {
					f.diskShared = disk + " (seen on " + name + " and another VM)"
				}
				f.mu.Unlock()
			}
		}
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn || strings.HasSuffix(name, "-old") {
			continue
		}
		f.mu.Lock()
		silent := f.silent[vm.Self.Value]
		f.mu.Unlock()
		if silent {
			continue
		}
		agent := f.agent(name, vm)
		if agent == nil {
			continue
		}
		var role v1.Role
		if code, err := call(agent, "GET", url+v1.PathNodeRole+"?after=0&wait=0s", nil, &role); err != nil || code != http.StatusOK {
			continue // a node being removed, or the controller restarting
		}
		st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseReady, ObservedRevision: role.Revision,
			Capabilities:   []string{v1.CapabilityHandOver, v1.CapabilityKeepPods},
			KubernetesNode: &v1.KubernetesNodeStatus{Ready: "True", KubeletVersion: role.Versions.Kubernetes, ObservedAt: time.Now()}}
		if role.Role == v1.RoleMaster {
			if disk := dataDiskOf(vm); disk != "" {
				st.EtcdMemberID = memberOf(disk)
			}
			st.Components = []v1.ComponentStatus{{Name: "etcd", Healthy: st.EtcdMemberID != "", Phase: "Converged"}}
			// As a real agent: the first snapshot at once, another as
			// soon as the role asks for one, the newest reported.
			f.mu.Lock()
			if !f.oldAgents[name] {
				st.Capabilities = append(st.Capabilities, v1.CapabilityEtcdSnapshots)
				_, saved := f.saved[name]
				switch since := role.Etcd.SnapshotSince; {
				case f.unsaved[name]:
				case !saved || since.After(f.saved[name]) && !v1.EtcdSnapshotCovers(f.saved[name], since):
					at := time.Now().UTC().Truncate(time.Second) // named to the second
					if !at.Equal(f.saved[name]) {
						f.kept[name] = append(f.kept[name], at)
					}
					f.saved[name] = at
				}
				if at, ok := f.saved[name]; ok {
					st.EtcdSnapshotAt, st.EtcdSnapshots = &at, f.kept[name]
				}
				st.Capabilities = append(st.Capabilities, v1.CapabilityEtcdRestore)
				if !f.noCopies[name] {
					st.Capabilities = append(st.Capabilities, v1.CapabilityEtcdRestoreFromController)
				}
				f.restore(name, role, &st, agent, url)
				if f.copying.Load() && !f.noCopies[name] {
					f.sendCopy(name, agent, url)
				}
			}
			f.mu.Unlock()
		}
		f.mu.Lock()
		stuck, held := f.stuck[name], f.held[name]
		if role.Leave != nil && role.Leave.KeepPods {
			f.keepPods[name] = true
		}
		f.mu.Unlock()
		switch {
		case role.Leave != nil && stuck:
			st.Phase, st.KubernetesNode = v1.PhaseLeaving, nil
			st.Components = []v1.ComponentStatus{{Name: "drain", Healthy: true, Phase: "Leaving",
				Message: "draining: 1 pods still on the node: default/web-1 (its disruption budget allows no eviction now)"}}
		case role.Leave != nil:
			st.Phase, st.KubernetesNode = v1.PhaseLeft, nil
			if role.Leave.HandOver {
				f.mu.Lock()
				if !f.handOvers[name] {
					f.order = append(f.order, name)
				}
				f.handOvers[name] = true
				f.mu.Unlock()
			}
		case f.badImage != "" && extraConfig(vm, vsphere.TagImage) == f.badImage && (!f.workersOnly.Load() || role.Role == v1.RoleWorker), held:
			st.Phase = v1.PhaseConverging
			kubeadm := v1.ComponentStatus{Name: "kubeadm", Phase: "Failed", Message: "role check refused the new image"}
			if f.refuse.Load() {
				kubeadm.Phase, kubeadm.Message = v1.ComponentRefused, "kubernetesVersion v1.2.0: this image carries no kubelet of that version"
			}
			st.Components = append(st.Components, kubeadm)
		}
		_, _ = call(agent, "POST", url+v1.PathNodeStatus, st, nil)
	}
}

// agent returns the VM's agent, enrolling it first with its guestinfo
// bootstrap.
func (f *fleet) agent(name string, vm mo.VirtualMachine) *http.Client {
	f.mu.Lock()
	a, ok := f.agents[vm.Self.Value]
	url, admin := f.url, f.admin
	f.mu.Unlock()
	if ok {
		return a
	}
	data, err := base64.StdEncoding.DecodeString(extraConfig(vm, "guestinfo.harmony.bootstrap"))
	var b v1.Bootstrap
	if err != nil || json.Unmarshal(data, &b) != nil {
		return nil
	}
	var n v1.Node
	if code, err := call(admin, "GET", url+v1.PathNodes+"/"+name, nil, &n); err != nil || code != http.StatusOK || len(n.IPs) == 0 {
		return nil
	}
	csr, key := makeCSR(f.e.t, csrOptions{cn: name, dnsNames: []string{name}, ips: []net.IP{net.ParseIP(n.IPs[0])}})
	var resp v1.CertificateResponse
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pool}}, Timeout: 30 * time.Second}
	if code, err := call(anon, "POST", url+v1.PathEnroll, v1.EnrollRequest{Token: b.Token, CSR: csr}, &resp); err != nil || code != http.StatusOK {
		return nil
	}
	certs, err := v1.ParseCertificatesPEM([]byte(resp.Certificate))
	if err != nil {
		return nil
	}
	cert := tls.Certificate{PrivateKey: key, Leaf: certs[0]}
	for _, c := range certs {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	a = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pool, Certificates: []tls.Certificate{cert}}}, Timeout: 30 * time.Second}
	f.mu.Lock()
	f.agents[vm.Self.Value] = a
	f.mu.Unlock()
	return a
}

// upgradeCheck is the state of a cluster's VMs that an upgrade must keep:
// each node's BIOS UUID, and each master's data disk and member.
type upgradeCheck struct {
	uuid, disk map[string]string
}

func (e *clusterEnv) snapshotVMs(cluster string) upgradeCheck {
	c := upgradeCheck{uuid: map[string]string{}, disk: map[string]string{}}
	for name, vm := range e.vms(cluster) {
		c.uuid[name] = vm.Config.Uuid
		c.disk[name] = dataDiskOf(vm)
	}
	return c
}

func (e *clusterEnv) cluster(name string) v1.Cluster {
	e.t.Helper()
	var cl v1.Cluster
	doJSON(e.t, e.tc.admin, "GET", e.tc.url+v1.PathClusters+"/"+name, nil).decode(e.t, &cl)
	return cl
}

func (e *clusterEnv) waitAllReady(cluster string) {
	e.t.Helper()
	waitFor(e.t, "every node of "+cluster+" Ready", func() bool {
		cl := e.cluster(cluster)
		for _, n := range cl.Status.Nodes {
			if n.Phase != "Ready" {
				return false
			}
		}
		return len(cl.Status.Nodes) > 0
	})
}

// An upgrade replaces every VM with a clone of the new image: masters one
// at a time, each handing over and then giving its data disk (and so its
// etcd member) to its replacement, which keeps the name, address and BIOS
// UUID; the worker is surged. Nothing is refused that should pass, and
// every check refuses what it should first.
func TestUpgradeReplacesEveryVMKeepingMastersDisks(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 30 * time.Second; c.UpgradeNodeTimeout = time.Minute })
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	spec := e.spec("up", 3, 1)
	spec.KubernetesVersion = "v1.33.4"
	e.do("POST", v1.PathClusters, spec)
	path := v1.PathClusters + "/up/upgrade"

	// Refused before anything changes, each naming its field.
	for _, c := range []struct {
		req    v1.UpgradeRequest
		status int
		code   string
		field  string
	}{
		{v1.UpgradeRequest{Image: newImage}, http.StatusUnprocessableEntity, v1.CodePrecheckFailed, "nodes"}, // no agent reported yet
		{v1.UpgradeRequest{}, http.StatusBadRequest, v1.CodeBadRequest, "image"},
		{v1.UpgradeRequest{Image: newImage, MaxSurge: 51}, http.StatusBadRequest, v1.CodeBadRequest, "maxSurge"},
		{v1.UpgradeRequest{Abort: true, Image: newImage}, http.StatusBadRequest, v1.CodeBadRequest, "image"},
		{v1.UpgradeRequest{Abort: true}, http.StatusConflict, v1.CodeConflict, ""},
	} {
		r := doJSON(t, e.tc.admin, "POST", e.tc.url+path, c.req)
		r.wantStatus(t, c.status, c.code)
		if r.err.Field != c.field {
			t.Errorf("%+v: field %q, want %q (%s)", c.req, r.err.Field, c.field, r.err.Message)
		}
	}

	fl := e.startFleet("up", "")
	e.waitAllReady("up")
	// The cluster's view carries what each agent said of its components.
	for _, n := range e.cluster("up").Status.Nodes {
		etcd := slices.ContainsFunc(n.Components, func(c v1.ComponentStatus) bool { return c.Name == "etcd" && c.Healthy })
		if etcd != (n.Role == v1.RoleMaster) {
			t.Errorf("%s (%s) shows components %+v", n.Name, n.Role, n.Components)
		}
	}
	for _, c := range []struct {
		req   v1.UpgradeRequest
		code  string
		field string
	}{
		{v1.UpgradeRequest{Image: "nope"}, v1.CodeBadRequest, "image"},
		{v1.UpgradeRequest{Image: e.image}, v1.CodeConflict, "image"},
		{v1.UpgradeRequest{Image: newImage, KubernetesVersion: "v1.35.0"}, v1.CodeBadRequest, "kubernetesVersion"},     // not in the image
		{v1.UpgradeRequest{Image: newImage, FreshDisk: []string{"up-m2", "up-w1"}}, v1.CodeBadRequest, "freshDisk[1]"}, // a worker has no data disk
		{v1.UpgradeRequest{Image: newImage, FreshDisk: []string{"up-m9"}}, v1.CodeBadRequest, "freshDisk[0]"},
		{v1.UpgradeRequest{FreshDisk: []string{"up-m2"}}, v1.CodeConflict, ""}, // no upgrade to amend
	} {
		r := doJSON(t, e.tc.admin, "POST", e.tc.url+path, c.req)
		if r.err.Code != c.code || r.err.Field != c.field {
			t.Errorf("%+v: %d %s field %q, want %s field %q", c.req, r.status, r.err.Code, r.err.Field, c.code, c.field)
		}
	}

	before := e.snapshotVMs("up")
	op := e.start("POST", path, v1.UpgradeRequest{Image: newImage, KubernetesVersion: "v1.34.2"})
	// While it runs, nothing else may change the cluster.
	two := 2
	doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/up/scale", v1.ScaleRequest{Workers: &two}).wantStatus(t, http.StatusConflict, v1.CodeConflict)
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("upgrade: %s: %s", got.State, got.Message)
	}
	fl.halt()

	after := e.snapshotVMs("up")
	vms := e.vms("up")
	for _, m := range []string{"up-m1", "up-m2", "up-m3"} {
		vm, ok := vms[m]
		switch {
		case !ok:
			t.Errorf("%s has no VM after the upgrade", m)
			continue
		case extraConfig(vm, vsphere.TagImage) != newImage:
			t.Errorf("%s runs image %q, want %q", m, extraConfig(vm, vsphere.TagImage), newImage)
		case after.disk[m] == "" || after.disk[m] != before.disk[m]:
			t.Errorf("%s has data disk %q, had %q", m, after.disk[m], before.disk[m])
		case after.uuid[m] != before.uuid[m]:
			t.Errorf("%s has BIOS UUID %s, had %s", m, after.uuid[m], before.uuid[m])
		case !fl.handOvers[m]:
			t.Errorf("%s's role never said HandOver", m)
		}
		if !e.dataDiskExists(after.disk[m]) {
			t.Errorf("%s's data disk file %s is gone", m, after.disk[m])
		}
	}
	if fl.diskShared != "" {
		t.Errorf("a data disk was on two VMs at once: %s", fl.diskShared)
	}
	// The worker was surged: a new one of the new image, the old one gone.
	if _, ok := vms["up-w1"]; ok {
		t.Error("the old worker up-w1 is still there")
	}
	if vm, ok := vms["up-w2"]; !ok || extraConfig(vm, vsphere.TagImage) != newImage {
		t.Errorf("no surge worker up-w2 of %s: %v", newImage, keys(vms))
	}
	if len(vms) != 4 {
		t.Errorf("VMs after the upgrade: %v, want the 3 masters and 1 worker (no old VM left)", keys(vms))
	}
	cl := e.cluster("up")
	if cl.Spec.Image != newImage || cl.Spec.KubernetesVersion != "v1.34.2" || cl.Spec.Workers != 1 {
		t.Errorf("spec after the upgrade: image %s, version %s, workers %d", cl.Spec.Image, cl.Spec.KubernetesVersion, cl.Spec.Workers)
	}
	if u := cl.Status.Upgrade; u == nil || u.State != v1.UpgradeSucceeded || u.Upgraded != 4 || u.Nodes != 4 || u.FromKubernetesVersion != "v1.33.4" {
		t.Errorf("upgrade status %+v", u)
	}
	// Masters went one at a time, the first master last.
	if got := strings.Join(fl.order, ","); got != "up-m2,up-m3,up-m1" {
		t.Errorf("masters handed over in the order %s, want up-m2, up-m3, up-m1", got)
	}
	for _, text := range []string{"handed over", "renamed up-m1-old", "the old VM's data disk", "the new VM serves", "replaced by a VM of image"} {
		e.event("up", "up-m1", text)
	}
	// Every role now carries the new version.
	for _, n := range cl.Status.Nodes {
		var r v1.Role
		doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/"+n.Name+"/role", nil).decode(t, &r)
		if r.Versions.Kubernetes != "v1.34.2" || r.Cluster.KubernetesVersion != "v1.34.2" || r.Leave != nil {
			t.Errorf("role of %s after the upgrade: version %s/%s, leave %+v", r.NodeName, r.Versions.Kubernetes, r.Cluster.KubernetesVersion, r.Leave)
		}
	}
}

// A data disk that cannot move is never replaced silently: the master's
// replacement stops on the missing disk, with what to do; the admin's
// fresh-disk amendment gives the new VM an empty disk, on which it comes
// back as a new member. A master chosen for the fresh-disk path at the
// start gets one too, and its old disk's file is kept.
func TestUpgradeFreshDiskOnlyWhenChosen(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 30 * time.Second; c.UpgradeNodeTimeout = time.Minute })
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	e.do("POST", v1.PathClusters, e.spec("fd", 3, 0))
	fl := e.startFleet("fd", "")
	e.waitAllReady("fd")
	before := e.snapshotVMs("fd")

	// fd-m2 is replaced first; its disk's file goes, as with a lost
	// datastore, while the VM still runs.
	e.loseDataDisk(before.disk["fd-m2"])
	op := e.start("POST", v1.PathClusters+"/fd/upgrade", v1.UpgradeRequest{Image: newImage, FreshDisk: []string{"fd-m3"}})
	if got := e.waitOp(op.ID); got.State != v1.OperationFailed || !strings.Contains(got.Message, "fd-m2") {
		t.Fatalf("upgrade with fd-m2's disk missing: %s: %s", got.State, got.Message)
	}
	if ev := e.event("fd", "fd-m2", "--fresh-disk fd-m2"); ev.Type != "Warning" || !strings.Contains(ev.Message, "missing") {
		t.Errorf("the missing disk's event: %+v", ev)
	}
	if n := len(e.vms("fd")); n != 4 {
		t.Errorf("%d VMs while fd-m2's replacement waits, want 4 (the old one kept)", n)
	}

	amend := e.start("POST", v1.PathClusters+"/fd/upgrade", v1.UpgradeRequest{FreshDisk: []string{"fd-m2"}})
	if ev := e.event("fd", "fd-m2", "fresh-disk path, chosen by admin"); ev.Type != "Warning" {
		t.Errorf("fd-m2: no Warning for its fresh-disk path: %+v", ev)
	}
	if got := e.waitOp(amend.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("upgrade after the fresh-disk amendment: %s: %s", got.State, got.Message)
	}
	fl.halt()
	after := e.snapshotVMs("fd")
	for _, m := range []string{"fd-m2", "fd-m3"} {
		if d := after.disk[m]; d == "" || d == before.disk[m] || !strings.Contains(d, "/"+m+"-") || !e.dataDiskExists(d) {
			t.Errorf("%s's data disk after the fresh-disk path: %q (before %q)", m, d, before.disk[m])
		}
	}
	if ev := e.event("fd", "fd-m3", "on the fresh-disk path"); ev.Type != "Warning" {
		t.Errorf("fd-m3: no Warning for its fresh-disk path: %+v", ev)
	}
	if !e.dataDiskExists(before.disk["fd-m3"]) {
		t.Errorf("fd-m3's old disk %s was deleted", before.disk["fd-m3"])
	}
	if after.disk["fd-m1"] != before.disk["fd-m1"] {
		t.Errorf("fd-m1 has data disk %s, had %s", after.disk["fd-m1"], before.disk["fd-m1"])
	}
	if fl.diskShared != "" {
		t.Errorf("a data disk was on two VMs at once: %s", fl.diskShared)
	}
	for _, n := range e.cluster("fd").Status.Nodes {
		if n.Image != newImage || n.Phase != "Ready" || n.DataDisk != after.disk[n.Name] {
			t.Errorf("node %s after the upgrade: image %s, phase %s, data disk %s", n.Name, n.Image, n.Phase, n.DataDisk)
		}
	}
}

// loseDataDisk deletes a data disk's file, as a lost datastore does,
// while its VM runs.
func (e *clusterEnv) loseDataDisk(path string) {
	e.t.Helper()
	dc, err := find.NewFinder(e.vc.Client).DefaultDatacenter(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	task, err := object.NewFileManager(e.vc.Client).DeleteDatastoreFile(context.Background(), path, dc)
	if err == nil {
		err = task.Wait(context.Background())
	}
	if err != nil || e.dataDiskExists(path) {
		e.t.Fatalf("delete %s: %v", path, err)
	}
}

// badUpgradeEnv is a Ready cluster of three masters and an imported
// image whose VMs never get Ready, with the masters' state before and the
// reference of the second master's VM, which is replaced first.
func badUpgradeEnv(t *testing.T, cluster string, nodeTimeout time.Duration) (*clusterEnv, *fleet, string, upgradeCheck, string) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 30 * time.Second; c.UpgradeNodeTimeout = nodeTimeout })
	bad := e.importImage(nodeOVA(t, "1.2.0-bad"))
	e.do("POST", v1.PathClusters, e.spec(cluster, 3, 0))
	fl := e.startFleet(cluster, bad)
	e.waitAllReady(cluster)
	return e, fl, bad, e.snapshotVMs(cluster), e.vms(cluster)[cluster+"-m2"].Self.Value
}

// A replacement that never gets Ready is rolled back: the new VM goes,
// and the old VM gets its name and data disk back and powers on; the
// upgrade stops, saying which node and why.
func TestUpgradeRollsBackAReplacementThatIsNotReady(t *testing.T) {
	e, fl, bad, before, oldRef := badUpgradeEnv(t, "rb", 5*time.Second)

	op := e.start("POST", v1.PathClusters+"/rb/upgrade", v1.UpgradeRequest{Image: bad})
	got := e.waitOp(op.ID)
	if got.State != v1.OperationFailed || !strings.Contains(got.Message, "rb-m2 was rolled back") || !strings.Contains(got.Message, "not Ready within 5s") {
		t.Fatalf("upgrade to a bad image: %s: %s", got.State, got.Message)
	}
	fl.halt()
	vms := e.vms("rb")
	vm, ok := vms["rb-m2"]
	switch {
	case !ok:
		t.Fatalf("no rb-m2 after the rollback: %v", keys(vms))
	case vm.Self.Value != oldRef:
		t.Errorf("rb-m2 is VM %s, want the old VM %s back", vm.Self.Value, oldRef)
	case vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn:
		t.Errorf("the old rb-m2 is %s after the rollback", vm.Runtime.PowerState)
	case dataDiskOf(vm) != before.disk["rb-m2"]:
		t.Errorf("the old rb-m2 has data disk %q, want %q", dataDiskOf(vm), before.disk["rb-m2"])
	}
	if len(vms) != 3 {
		t.Errorf("VMs after the rollback: %v, want the 3 masters", keys(vms))
	}
	if fl.diskShared != "" {
		t.Errorf("a data disk was on two VMs at once: %s", fl.diskShared)
	}
	cl := e.cluster("rb")
	if u := cl.Status.Upgrade; u == nil || u.State != v1.UpgradeRolledBack || cl.Spec.Image != e.image {
		t.Errorf("after the rollback: spec image %s, upgrade %+v", cl.Spec.Image, u)
	}
	for _, n := range cl.Status.Nodes {
		if n.Image != e.image || n.Upgrade != "" {
			t.Errorf("node %s after the rollback: image %s, upgrade %q", n.Name, n.Image, n.Upgrade)
		}
	}
	if ev := e.event("rb", "rb-m2", "rolled back: the old VM"); ev.Type != "Warning" {
		t.Errorf("rollback event %+v", ev)
	}
}

// A replacement whose agent says it refuses its role for good (its image
// lacks what the role asks for) is rolled back at once, not after the
// node timeout, and the upgrade says why.
func TestUpgradeRollsBackARefusedReplacementAtOnce(t *testing.T) {
	e, fl, bad, before, oldRef := badUpgradeEnv(t, "rr", time.Hour)
	fl.refuse.Store(true)

	op := e.start("POST", v1.PathClusters+"/rr/upgrade", v1.UpgradeRequest{Image: bad})
	got := e.waitOp(op.ID)
	if got.State != v1.OperationFailed || !strings.Contains(got.Message, "rr-m2 was rolled back") ||
		!strings.Contains(got.Message, "refused its role: kubeadm: kubernetesVersion v1.2.0: this image carries no kubelet") {
		t.Fatalf("upgrade to an image that refuses the role: %s: %s", got.State, got.Message)
	}
	fl.halt()
	vms := e.vms("rr")
	if vm, ok := vms["rr-m2"]; !ok || vm.Self.Value != oldRef || vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn ||
		dataDiskOf(vm) != before.disk["rr-m2"] {
		t.Errorf("rr-m2 after the rollback: %+v, want the old VM %s powered on with disk %s", vms["rr-m2"].Self, oldRef, before.disk["rr-m2"])
	}
	if len(vms) != 3 || fl.diskShared != "" {
		t.Errorf("VMs after the rollback: %v (want the 3 masters); disk on two VMs: %q", keys(vms), fl.diskShared)
	}
}

// A surge worker that does not get Ready stops the upgrade on its own,
// as a master's replacement does: the surge worker goes, the worker it
// was to replace serves on, and the upgrade says which and why. A refusal
// stops it at once; otherwise the node timeout does.
func TestUpgradeRollsBackASurgeWorkerThatIsNotReady(t *testing.T) {
	for _, tc := range []struct {
		cluster     string
		refuse      bool
		nodeTimeout time.Duration
		want        string
	}{
		{"sw", false, 5 * time.Second, "the new worker sw-w2 was not Ready within 5s of its power-on"},
		{"sr", true, time.Hour, "the new worker sr-w2 refused its role: kubeadm: kubernetesVersion v1.2.0"},
	} {
		t.Run(tc.cluster, func(t *testing.T) {
			e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 10 * time.Second; c.UpgradeNodeTimeout = tc.nodeTimeout })
			bad := e.importImage(nodeOVA(t, "1.2.0-bad"))
			e.do("POST", v1.PathClusters, e.spec(tc.cluster, 1, 1))
			fl := e.startFleet(tc.cluster, bad)
			fl.workersOnly.Store(true)
			fl.refuse.Store(tc.refuse)
			e.waitAllReady(tc.cluster)
			oldWorker := e.vms(tc.cluster)[tc.cluster+"-w1"].Self.Value

			op := e.start("POST", v1.PathClusters+"/"+tc.cluster+"/upgrade", v1.UpgradeRequest{Image: bad})
			surge := tc.cluster + "-w2"
			if !tc.refuse {
				// The node timeout leaves seconds to see the pair.
				waitFor(t, "the surge worker and the worker it replaces named on each other", func() bool {
					upgrade := map[string]string{}
					for _, n := range e.cluster(tc.cluster).Status.Nodes {
						upgrade[n.Name] = n.Upgrade
					}
					return upgrade[surge] == v1.UpgradeReplaces+tc.cluster+"-w1" && upgrade[tc.cluster+"-w1"] == v1.UpgradeReplacedBy+surge
				})
			}
			got := e.waitOp(op.ID)
			if got.State != v1.OperationFailed || !strings.Contains(got.Message, tc.want) || !strings.Contains(got.Message, "its surge workers went") {
				t.Fatalf("upgrade whose surge worker fails: %s: %s", got.State, got.Message)
			}
			if u := e.cluster(tc.cluster).Status.Upgrade; u == nil || u.State != v1.UpgradeRolledBack {
				t.Errorf("upgrade after the surge worker failed: %+v", u)
			}
			waitFor(t, "the surge worker's VM gone", func() bool {
				_, ok := e.vms(tc.cluster)[surge]
				return !ok
			})
			fl.halt()
			if vm, ok := e.vms(tc.cluster)[tc.cluster+"-w1"]; !ok || vm.Self.Value != oldWorker || vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
				t.Errorf("the old worker after the rollback: present %v, VM %s (want %s), %s", ok, vm.Self.Value, oldWorker, vm.Runtime.PowerState)
			}
			if ev := e.event(tc.cluster, surge, "the upgrade stops"); ev.Type != "Warning" || ev.Reason != "UpgradeRollback" {
				t.Errorf("rollback event %+v", ev)
			}
			for _, n := range e.cluster(tc.cluster).Status.Nodes {
				if n.Name == surge {
					t.Errorf("the surge worker is still a node of the cluster: %+v", n)
				}
			}
		})
	}
}

// Surge workers that are Ready take over from their old workers before a
// failing one stops the upgrade: with two surging at once, the Ready one
// stays and its old worker goes; the refusing one goes and its old
// worker stays.
func TestUpgradeKeepsReadySurgeWorkersWhenAnotherFails(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 10 * time.Second; c.UpgradeNodeTimeout = time.Hour })
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	e.do("POST", v1.PathClusters, e.spec("mx", 1, 2))
	fl := e.startFleet("mx", "")
	fl.hold("mx-w4", true) // the surge worker for mx-w2
	e.waitAllReady("mx")

	op := e.start("POST", v1.PathClusters+"/mx/upgrade", v1.UpgradeRequest{Image: newImage, MaxSurge: 2})
	// Only once mx-w3 has taken over does mx-w4 say it never will.
	waitFor(t, "mx-w3 Ready in place of mx-w1", func() bool {
		return slices.ContainsFunc(e.cluster("mx").Status.Events, func(ev v1.Event) bool {
			return ev.Node == "mx-w1" && strings.Contains(ev.Message, "its replacement mx-w3")
		})
	})
	fl.refuse.Store(true)
	got := e.waitOp(op.ID)
	if got.State != v1.OperationFailed || !strings.Contains(got.Message, "the new worker mx-w4 refused its role") {
		t.Fatalf("upgrade with a refusing surge worker: %s: %s", got.State, got.Message)
	}
	waitFor(t, "mx-w1 and mx-w4 gone, mx-w2 and mx-w3 kept", func() bool {
		vms := e.vms("mx")
		_, w1 := vms["mx-w1"]
		_, w2 := vms["mx-w2"]
		_, w3 := vms["mx-w3"]
		_, w4 := vms["mx-w4"]
		return !w1 && w2 && w3 && !w4
	})
	fl.halt()
	if u := e.cluster("mx").Status.Upgrade; u == nil || u.State != v1.UpgradeRolledBack {
		t.Errorf("upgrade after the refusal: %+v", u)
	}
}

// assertUpgraded checks what every finished upgrade must leave: each
// master on the new image with its own data disk and BIOS UUID, no data
// disk ever on two VMs, no old VM left.
func (e *clusterEnv) assertUpgraded(fl *fleet, cluster, image string, before upgradeCheck, masters []string, nodes int) {
	e.t.Helper()
	after := e.snapshotVMs(cluster)
	vms := e.vms(cluster)
	for _, m := range masters {
		vm, ok := vms[m]
		switch {
		case !ok:
			e.t.Errorf("%s has no VM after the upgrade", m)
			continue
		case extraConfig(vm, vsphere.TagImage) != image:
			e.t.Errorf("%s runs image %q, want %q", m, extraConfig(vm, vsphere.TagImage), image)
		case after.disk[m] == "" || after.disk[m] != before.disk[m]:
			e.t.Errorf("%s has data disk %q, had %q", m, after.disk[m], before.disk[m])
		case after.uuid[m] != before.uuid[m]:
			e.t.Errorf("%s has BIOS UUID %s, had %s", m, after.uuid[m], before.uuid[m])
		case vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn:
			e.t.Errorf("%s is %s", m, vm.Runtime.PowerState)
		}
		if !e.dataDiskExists(after.disk[m]) {
			e.t.Errorf("%s's data disk file %s is gone", m, after.disk[m])
		}
	}
	if fl.diskShared != "" {
		e.t.Errorf("a data disk was on two VMs at once: %s", fl.diskShared)
	}
	if len(vms) != nodes {
		e.t.Errorf("VMs after the upgrade: %v, want %d (no old VM left)", keys(vms), nodes)
	}
}

// A controller stopped again and again while it replaces masters (its
// step in flight cut off, the vCenter action done or not, unrecorded)
// resumes each time from the store, and the upgrade ends as one never
// interrupted: same disks, same members, no disk on two VMs, no VM left
// over.
func TestUpgradeSurvivesControllerRestarts(t *testing.T) {
	// Each vCenter call of a replacement takes a while, as on a real
	// vCenter, so that restarts land inside them: the call goes through
	// while the controller that made it is gone.
	slow := map[string]int{}
	for _, m := range []string{"PowerOffVM_Task", "PowerOnVM_Task", "ReconfigVM_Task", "Rename_Task", "CloneVM_Task", "Destroy_Task"} {
		slow[m] = 300
	}
	// The simulator runs in a process of its own: each restart cuts off
	// the controller's task waits, and govmomi's simulator then races with
	// itself (DestroyPropertyFilter against a WaitForUpdatesEx still being
	// answered), which -race blames on this test.
	sim := &vcsim.Sim{Endpoint: htest.VCSimProcess(t, "-method-delay", vcsim.FormatMethodDelay(slow))}
	e := newClusterEnvAt(t, sim, func(c *Config) { c.LeaveTimeout = 30 * time.Second; c.UpgradeNodeTimeout = time.Minute })
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	e.do("POST", v1.PathClusters, e.spec("rs", 3, 0))
	fl := e.startFleet("rs", "")
	e.waitAllReady("rs")
	before := e.snapshotVMs("rs")

	op := e.start("POST", v1.PathClusters+"/rs/upgrade", v1.UpgradeRequest{Image: newImage})
	interrupted := map[string]bool{}
	restarts := 0
	deadline := time.Now().Add(4 * time.Minute)
	for {
		// Stop at varied points: 150 ms to 1 s after the last start.
		time.Sleep(time.Duration(150+restarts*170%850) * time.Millisecond)
		var got v1.Operation
		doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathOperations+"/"+op.ID, nil).decode(t, &got)
		if got.Done() {
			if got.State != v1.OperationSucceeded {
				t.Fatalf("upgrade: %s: %s", got.State, got.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upgrade did not finish after %d restarts: %+v", restarts, got.Nodes)
		}
		for _, n := range e.cluster("rs").Status.Nodes {
			if n.Upgrade != "" {
				interrupted[n.Upgrade+"/"+n.Step] = true
			}
		}
		e.restart()
		fl.follow(e.tc)
		restarts++
	}
	fl.halt()
	t.Logf("%d restarts, at %v", restarts, keys(interrupted))
	if restarts < 4 {
		t.Errorf("only %d restarts during the upgrade", restarts)
	}
	e.assertUpgraded(fl, "rs", newImage, before, []string{"rs-m1", "rs-m2", "rs-m3"}, 3)
}

// An admin's abort turns the replacement under way around: the new VM
// goes, the old one serves again with its disk, and the upgrade ends
// Aborted.
func TestUpgradeAbortRollsBackTheNodeBeingReplaced(t *testing.T) {
	e, fl, bad, before, oldRef := badUpgradeEnv(t, "ab", 10*time.Minute)

	op := e.start("POST", v1.PathClusters+"/ab/upgrade", v1.UpgradeRequest{Image: bad})
	e.waitReplacementStep("ab", "ab-m2", v1.SwapVerifying) // its new VM waits to get Ready
	abort := e.start("POST", v1.PathClusters+"/ab/upgrade", v1.UpgradeRequest{Abort: true})
	if abort.ID != op.ID {
		t.Errorf("the abort answered operation %s, want the upgrade's %s", abort.ID, op.ID)
	}
	got := e.waitOp(op.ID)
	if got.State != v1.OperationFailed || !strings.Contains(got.Message, "rolled back") || !strings.Contains(got.Message, "aborted by") {
		t.Fatalf("aborted upgrade: %s: %s", got.State, got.Message)
	}
	fl.halt()
	if vm := e.vms("ab")["ab-m2"]; vm.Self.Value != oldRef {
		t.Errorf("ab-m2 is VM %s after the abort, want the old %s", vm.Self.Value, oldRef)
	}
	e.assertUpgraded(fl, "ab", e.image, before, []string{"ab-m1", "ab-m2", "ab-m3"}, 3)
	if u := e.cluster("ab").Status.Upgrade; u == nil || u.State != v1.UpgradeAborted {
		t.Errorf("upgrade after the abort: %+v", u)
	}
	doJSON(t, e.tc.admin, "POST", e.tc.url+v1.PathClusters+"/ab/upgrade", v1.UpgradeRequest{Abort: true}).wantStatus(t, http.StatusConflict, v1.CodeConflict)
}

// restore does a master's part of the restore its role asks for, as a
// real agent would, and reports the newest done: a source told to fetch
// the controller's copy fetches it with the agent's certificate. Called
// with mu held.
func (f *fleet) restore(name string, role v1.Role, st *v1.Status, agent *http.Client, url string) {
	if r := role.Etcd.Restore; r != nil && f.restored[name] != r.ID {
		var fetchErr error
		if r.FromController {
			f.toldToFetch[name] = true
			f.fetched[name], fetchErr = fetch(agent, url+v1.EtcdSnapshotCopyPath(r.SnapshotTakenAt))
		}
		switch {
		case fetchErr != nil:
			st.Components[0].Healthy, st.Components[0].Phase = false, "Failed"
			st.Components[0].Message = "restore " + r.ID + ": " + fetchErr.Error()
		case r.Source == name && f.unrestorable[name]:
			st.Components[0].Healthy, st.Components[0].Phase = false, "Failed"
			st.Components[0].Message = "restore " + r.ID + ": no snapshot taken at " + r.SnapshotTakenAt.Format(time.RFC3339)
		case r.Source == name || r.SourceRestored:
			f.restored[name] = r.ID
			f.restoreOrder = append(f.restoreOrder, r.ID+" "+name)
		default:
			st.Components[0].Healthy, st.Components[0].Phase = false, "Failed"
			st.Components[0].Message = "restore " + r.ID + ": this member's state is set aside; it joins " + r.Source + "'s restored cluster once the controller says so"
		}
	}
	st.EtcdRestored = f.restored[name]
}

// sendCopy sends the master's newest snapshot to the controller, once,
// if the controller takes it (GET the list, then PUT), as an agent does.
func (f *fleet) sendCopy(name string, agent *http.Client, url string) {
	at, ok := f.saved[name]
	if !ok || at.Equal(f.sent[name]) {
		return
	}
	var list v1.EtcdSnapshotCopyList
	if code, err := call(agent, "GET", url+v1.PathNodeEtcdSnapshots, nil, &list); err != nil || code != http.StatusOK {
		return
	}
	if at.After(list.NextAfter) {
		req, err := http.NewRequest("PUT", url+v1.EtcdSnapshotCopyPath(at), bytes.NewReader(f.copy))
		if err != nil {
			return
		}
		resp, err := agent.Do(req)
		if err != nil {
			return
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			f.keptFrom[at] = name
		}
	}
	f.sent[name] = at
}

// fetch is the body of a 200 answer to GET url.
func fetch(c *http.Client, url string) ([]byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, data)
	}
	return data, err
}

// hold makes a node report as a VM of the bad image does, or as its own
// image does.
func (f *fleet) hold(node string, held bool) {
	f.mu.Lock()
	f.held[node] = held
	f.mu.Unlock()
}

// handedOver reports whether node's role said HandOver; sharedDisk is
// the first disk seen on two VMs. Both may be read while the fleet runs.
func (f *fleet) handedOver(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.handOvers[node]
}

func (f *fleet) sharedDisk() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.diskShared
}

// settle waits for a whole tick begun after the call: a tick reads the
// VMs once, so one under way may still act on a VM just powered off or
// silenced.
func (f *fleet) settle() {
	f.e.t.Helper()
	n := f.ticks.Load()
	waitFor(f.e.t, "a whole tick of the fleet", func() bool { return f.ticks.Load() >= n+2 })
}

// silence makes a VM's agent report nothing, as one whose guest hangs.
func (f *fleet) silence(vm string) {
	f.mu.Lock()
	f.silent[vm] = true
	f.mu.Unlock()
}

// failSnapshots makes a master's etcd snapshots fail (and lose those it
// had), or lets them be.
func (f *fleet) failSnapshots(node string, fail bool) {
	f.mu.Lock()
	f.unsaved[node] = fail
	if fail {
		delete(f.saved, node)
	}
	f.mu.Unlock()
}

// oldAgent makes a master's agent one that takes no etcd snapshots, or
// one that does.
func (f *fleet) oldAgent(node string, old bool) {
	f.mu.Lock()
	f.oldAgents[node] = old
	f.mu.Unlock()
}

// setStuck makes a node's pods unable to move, or lets them.
func (f *fleet) setStuck(node string, stuck bool) {
	f.mu.Lock()
	f.stuck[node] = stuck
	f.mu.Unlock()
}

// A worker an upgrade replaces whose pods cannot move (a disruption
// budget) is not powered off with them: its role says KeepPods, and past
// its leave deadline the upgrade stops, saying why and what to do; the
// old worker keeps running. Once the pods can move, a retry gives it a
// new deadline and the upgrade finishes.
func TestUpgradeStopsRatherThanForceAWorkerOff(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 4 * time.Second; c.UpgradeNodeTimeout = time.Minute })
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	e.do("POST", v1.PathClusters, e.spec("kp", 1, 1))
	fl := e.startFleet("kp", "")
	fl.setStuck("kp-w1", true)
	e.waitAllReady("kp")

	op := e.start("POST", v1.PathClusters+"/kp/upgrade", v1.UpgradeRequest{Image: newImage})
	got := e.waitOp(op.ID)
	if got.State != v1.OperationFailed || !strings.Contains(got.Message, "kp-w1 did not leave by") || !strings.Contains(got.Message, "disruption budget") ||
		!strings.Contains(got.Message, "cluster retry kp") {
		t.Fatalf("upgrade with a worker whose pods cannot move: %s: %s", got.State, got.Message)
	}
	if vm, ok := e.vms("kp")["kp-w1"]; !ok || vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("the old worker was not kept running: %v %v", ok, vm.Runtime.PowerState)
	}
	fl.mu.Lock()
	keep := fl.keepPods["kp-w1"]
	fl.mu.Unlock()
	if !keep {
		t.Error("the old worker's role did not say keepPods")
	}
	if u := e.cluster("kp").Status.Upgrade; u == nil || u.State != v1.UpgradeRunning {
		t.Errorf("the upgrade after the stop: %+v", u)
	}

	fl.setStuck("kp-w1", false)
	retry := e.start("POST", v1.PathClusters+"/kp/retry", nil)
	if got := e.waitOp(retry.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("retry: %s: %s", got.State, got.Message)
	}
	fl.halt()
	cl := e.cluster("kp")
	if u := cl.Status.Upgrade; u == nil || u.State != v1.UpgradeSucceeded {
		t.Errorf("upgrade after the retry: %+v", u)
	}
	if _, ok := e.vms("kp")["kp-w1"]; ok {
		t.Error("the old worker is still there after the retry")
	}
}

// An upgrade replaces no master until every master reports an etcd
// snapshot since the upgrade started (the roles ask for one): a master
// whose snapshot fails holds it, saying which, and once it has one the
// upgrade goes on and ends as any other. An agent that takes no snapshots
// is not waited for; once it reports that it takes them, its role asks
// for one too.
func TestUpgradeWaitsForEtcdSnapshots(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) { c.LeaveTimeout = 30 * time.Second; c.UpgradeNodeTimeout = time.Minute })
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	e.do("POST", v1.PathClusters, e.spec("sv", 3, 0))
	fl := e.startFleet("sv", "")
	fl.oldAgent("sv-m2", true)
	e.waitAllReady("sv")
	before := e.snapshotVMs("sv")
	fl.failSnapshots("sv-m3", true)
	waitFor(t, "sv-m3 reporting no etcd snapshot", func() bool {
		return slices.ContainsFunc(e.cluster("sv").Status.Nodes, func(n v1.ClusterNode) bool {
			return n.Name == "sv-m3" && n.EtcdSnapshotAt == nil
		})
	})

	op := e.start("POST", v1.PathClusters+"/sv/upgrade", v1.UpgradeRequest{Image: newImage})
	waitFor(t, "the upgrade waiting for sv-m3's snapshot", func() bool {
		for _, c := range e.cluster("sv").Status.Conditions {
			if c.Type == v1.ConditionUpgrading && c.Reason == "Waiting" && strings.Contains(c.Message, "master sv-m3 has no etcd snapshot since the upgrade started") {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // a few of the engine's passes
	fl.mu.Lock()
	order := slices.Clone(fl.order)
	fl.mu.Unlock()
	if len(order) != 0 {
		t.Fatalf("%v handed over before sv-m3 had a snapshot", order)
	}

	fl.oldAgent("sv-m2", false)
	waitFor(t, "sv-m2's role asking for a snapshot once its agent takes them", func() bool {
		var r v1.Role
		doJSON(t, e.tc.admin, "GET", e.tc.url+v1.PathNodes+"/sv-m2/role", nil).decode(t, &r)
		return r.Etcd != nil && !r.Etcd.SnapshotSince.IsZero()
	})
	fl.failSnapshots("sv-m3", false)
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("upgrade once every master has a snapshot: %s: %s", got.State, got.Message)
	}
	// The cluster's view says when each master's newest snapshot was
	// taken (harmonyctl cluster get shows its age).
	for _, n := range e.cluster("sv").Status.Nodes {
		if n.EtcdSnapshotAt == nil || n.EtcdSnapshotAt.IsZero() {
			t.Errorf("%s: no etcd snapshot in the cluster's view", n.Name)
		}
	}
	fl.halt()
	e.assertUpgraded(fl, "sv", newImage, before, []string{"sv-m1", "sv-m2", "sv-m3"}, 3)
}

// A cluster at work moves on at the report it waits for, not at its next
// look: with that look an hour apart, an upgrade of a master and a worker
// still ends within minutes, each hand-over, new VM's Ready and leave
// seen when the node reports it (a report with news for the wait).
func TestUpgradeMovesOnAtTheReportsItWaitsFor(t *testing.T) {
	e := newClusterEnv(t, func(c *Config) {
		c.ClusterStatusPoll = time.Hour
		c.LeaveTimeout, c.UpgradeNodeTimeout = 10*time.Minute, 10*time.Minute // past waitOp's 3 minutes
	})
	newImage := e.importImage(nodeOVA(t, "1.1.0"))
	e.do("POST", v1.PathClusters, e.spec("wake", 1, 1))
	fl := e.startFleet("wake", "")
	e.waitAllReady("wake")
	op := e.start("POST", v1.PathClusters+"/wake/upgrade", v1.UpgradeRequest{Image: newImage})
	if got := e.waitOp(op.ID); got.State != v1.OperationSucceeded {
		t.Fatalf("upgrade: %s: %s", got.State, got.Message)
	}
	fl.halt()
	if !fl.handOvers["wake-m1"] {
		t.Error("wake-m1's role never said HandOver")
	}
	for name, vm := range e.vms("wake") {
		if extraConfig(vm, vsphere.TagImage) != newImage {
			t.Errorf("%s runs image %q after the upgrade", name, extraConfig(vm, vsphere.TagImage))
		}
	}
}
