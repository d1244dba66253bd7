package etcd

import (
	"context"
	"golang.org/x/sys/unix"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// These tests check the component's decisions with a recording service
// manager and no network (every member is unreachable); the real etcd
// runs in e2e_test.go.

var unitMasters = map[string]string{"m1": "198.18.0.11", "m2": "198.18.0.12", "m3": "198.18.0.13"}

type fixture struct {
	host *reconcile.Host
	rec  *servicetest.Recorder
	comp *Component
	ca   *v1.KeyPair
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	rec := servicetest.New()
	return &fixture{
		host: &reconcile.Host{Root: t.TempDir(), Services: rec, Log: slog.New(slog.DiscardHandler)},
		rec:  rec,
		comp: New(Config{DialContext: noNetwork}),
		ca:   newCA(t, "etcd-ca"),
	}
}

func (f *fixture) role(t *testing.T) *v1.Role { return testRole(t, "m2", unitMasters, f.ca) }

func (f *fixture) pass(t *testing.T, role *v1.Role) reconcile.Status {
	t.Helper()
	return f.comp.Reconcile(context.Background(), f.host, role)
}

func (f *fixture) command(t *testing.T) []string {
	t.Helper()
	u, ok := f.rec.Unit(UnitName)
	if !ok {
		t.Fatal("no etcd unit")
	}
	return u.Command
}

func flagValue(cmd []string, flag string) string {
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// fakeState makes the data directory look like a member's (a WAL file),
// as it does once etcd has run.
func (f *fixture) fakeState(t *testing.T) {
	t.Helper()
	wal := f.host.Path(DefaultDataDir + "/member/wal")
	if err := os.MkdirAll(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFoundsClusterWhenNoMemberAnswers(t *testing.T) {
	f := newFixture(t)
	st := f.pass(t, f.role(t))
	want := []string{"wrote " + PKIDir + "/ca.crt", "issued server certificate", "issued peer certificate",
		"issued client certificate", "wrote " + BootstrapFile, "started etcd"}
	if st.Phase != reconcile.PhaseConverged || !slices.Equal(st.Actions, want) || st.Healthy ||
		!strings.HasPrefix(st.Message, "etcd is not answering") || !slices.Equal(st.Units, []string{"etcd"}) {
		t.Fatalf("first pass %+v, want actions %q", st, want)
	}
	cmd := f.command(t)
	if got := flagValue(cmd, "--initial-cluster"); got != "m1=https://198.18.0.11:2380,m2=https://198.18.0.12:2380,m3=https://198.18.0.13:2380" {
		t.Errorf("--initial-cluster=%s (workers are no members; sorted by name)", got)
	}
	if flagValue(cmd, "--initial-cluster-state") != StateNew || flagValue(cmd, "--data-dir") != f.host.Path("/var/lib/etcd") ||
		flagValue(cmd, "--initial-cluster-token") != "lab" {
		t.Errorf("command %q", cmd)
	}
	// Keys are private; the data directory too.
	for _, p := range []string{serverKey, peerKey, clientKey} {
		if info, err := os.Stat(f.host.Path(PKIDir + "/" + p)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", p, info.Mode(), err)
		}
	}
	if info, err := os.Stat(f.host.Path(DefaultDataDir)); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("data dir: %v", err)
	}

	// The same role again: nothing.
	f.rec.TakeCalls()
	if st := f.pass(t, f.role(t)); len(st.Actions) != 0 || st.Phase != reconcile.PhaseConverged {
		t.Errorf("second pass %+v", st)
	}
	if calls := f.rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("second pass calls %q", calls)
	}
}

// Once the member has state, its unit follows from the bootstrap record,
// not from the role's peers: a new master or worker restarts nothing.
func TestPeersChangeAfterBootstrapRestartNothing(t *testing.T) {
	f := newFixture(t)
	f.pass(t, f.role(t))
	before := f.command(t)
	f.fakeState(t)
	f.rec.TakeCalls()
	r := f.role(t)
	r.Peers = append(r.Peers, v1.Peer{Name: "m4", Role: v1.RoleMaster, Address: "198.18.0.14"},
		v1.Peer{Name: "w9", Role: v1.RoleWorker, Address: "198.18.0.29"})
	st := f.pass(t, r)
	if len(st.Actions) != 0 || st.Phase != reconcile.PhaseConverged {
		t.Errorf("pass with new peers: %+v", st)
	}
	if calls := f.rec.TakeCalls(); len(calls) != 0 || !slices.Equal(f.command(t), before) {
		t.Errorf("calls %q, command %q (was %q)", calls, f.command(t), before)
	}
}

// A reimaged node: the data disk came across, the root disk is new (no
// bootstrap record). etcd starts from its state; the flags say "existing"
// with this member alone, so an empty directory could never found a
// cluster.
func TestDataDirectoryWithStateStartsAsItself(t *testing.T) {
	f := newFixture(t)
	f.fakeState(t)
	st := f.pass(t, f.role(t))
	if st.Phase != reconcile.PhaseConverged || !slices.Contains(st.Actions, "started etcd") || slices.Contains(st.Actions, "wrote "+BootstrapFile) {
		t.Fatalf("pass %+v", st)
	}
	cmd := f.command(t)
	if flagValue(cmd, "--initial-cluster-state") != StateExisting || flagValue(cmd, "--initial-cluster") != "m2=https://198.18.0.12:2380" {
		t.Errorf("command %q", cmd)
	}
	if _, err := os.Stat(f.host.Path(BootstrapFile)); !os.IsNotExist(err) {
		t.Errorf("a bootstrap record was written for a member that did not bootstrap: %v", err)
	}
}

// A new etcd CA restarts etcd (it reads its trusted CA only at start); a
// renewed leaf certificate does not (it reads those on each handshake).
func TestCertificateChanges(t *testing.T) {
	f := newFixture(t)
	f.pass(t, f.role(t))
	f.rec.TakeCalls()

	if err := os.Remove(f.host.Path(PKIDir + "/" + peerCert)); err != nil {
		t.Fatal(err)
	}
	if st := f.pass(t, f.role(t)); !slices.Equal(st.Actions, []string{"issued peer certificate"}) {
		t.Errorf("lost peer certificate: %+v", st)
	}
	if calls := f.rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("a renewed leaf certificate made calls %q", calls)
	}

	f.ca = newCA(t, "rotated-etcd-ca")
	st := f.pass(t, f.role(t))
	want := []string{"wrote " + PKIDir + "/ca.crt", "issued server certificate", "issued peer certificate",
		"issued client certificate", "reloaded etcd"}
	if !slices.Equal(st.Actions, want) {
		t.Errorf("new CA: actions %q, want %q", st.Actions, want)
	}
	if calls := f.rec.TakeCalls(); !slices.Equal(calls, []string{"reload etcd"}) {
		t.Errorf("new CA: calls %q", calls)
	}
}

// Every refusal names the role field, and touches nothing: no call to the
// manager, no file written.
func TestBadRolesFailNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		mutate      func(r *v1.Role)
	}{
		{"no etcd CA", "pki.etcdCA", func(r *v1.Role) { r.PKI.EtcdCA = nil }},
		{"no PKI", "pki.etcdCA", func(r *v1.Role) { r.PKI = nil }},
		{"CA without key", "pki.etcdCA.key", func(r *v1.Role) { r.PKI.EtcdCA.Key = "" }},
		{"CA key garbage", "pki.etcdCA", func(r *v1.Role) { r.PKI.EtcdCA.Key = "not a key" }},
		{"not among peers", "peers", func(r *v1.Role) { r.NodeName = "m9" }},
		{"among peers as a worker", "peers", func(r *v1.Role) {
			for i := range r.Peers {
				if r.Peers[i].Name == "m2" {
					r.Peers[i].Role = v1.RoleWorker
				}
			}
		}},
		{"relative data dir", "etcd.dataDir", func(r *v1.Role) { r.Etcd = &v1.EtcdSettings{DataDir: "var/lib/etcd"} }},
		{"root data dir", "etcd.dataDir", func(r *v1.Role) { r.Etcd = &v1.EtcdSettings{DataDir: "/"} }},
		{"unclean data dir", "etcd.dataDir", func(r *v1.Role) { r.Etcd = &v1.EtcdSettings{DataDir: "/data/../etc"} }},
		{"data dir over the agent's files", "etcd.dataDir", func(r *v1.Role) { r.Etcd = &v1.EtcdSettings{DataDir: "/etc/harmony"} }},
		{"two masters on one address", "address", func(r *v1.Role) {
			for i := range r.Peers {
				if r.Peers[i].Name == "m3" {
					r.Peers[i].Address = "198.18.0.12"
				}
			}
		}},
		{"bad peer address", "address", func(r *v1.Role) {
			for i := range r.Peers {
				if r.Peers[i].Name == "m3" {
					r.Peers[i].Address = "m3.example"
				}
			}
		}},
		{"no cluster name", "cluster.name", func(r *v1.Role) { r.Cluster.Name = "" }},
		{"snapshots every second", "etcd.snapshots.interval", func(r *v1.Role) {
			r.Etcd = &v1.EtcdSettings{Snapshots: &v1.EtcdSnapshots{Interval: "1s"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			r := cloneRole(f.role(t))
			tc.mutate(r)
			st := f.pass(t, r)
			if st.Phase != reconcile.PhaseFailed || st.Healthy || !strings.Contains(st.Message, tc.field) || len(st.Actions) != 0 {
				t.Errorf("%+v, want Failed naming %s", st, tc.field)
			}
			if calls := f.rec.TakeCalls(); len(calls) != 0 {
				t.Errorf("calls %q", calls)
			}
			if _, err := os.Stat(f.host.Path("/etc")); !os.IsNotExist(err) {
				t.Errorf("files were written: %v", err)
			}
		})
	}
}

// A bad role leaves a running member alone, and says so.
func TestBadRoleKeepsTheRunningMember(t *testing.T) {
	f := newFixture(t)
	f.pass(t, f.role(t))
	before := f.command(t)
	f.rec.TakeCalls()
	r := cloneRole(f.role(t))
	r.Etcd = &v1.EtcdSettings{DataDir: "relative"}
	st := f.pass(t, r)
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "etcd.dataDir") || !strings.Contains(st.Message, "keeps running") {
		t.Errorf("%+v", st)
	}
	if calls := f.rec.TakeCalls(); len(calls) != 0 || !slices.Equal(f.command(t), before) {
		t.Errorf("calls %q", calls)
	}
}

func TestWorkerStopsEtcd(t *testing.T) {
	f := newFixture(t)
	f.pass(t, f.role(t))
	f.rec.TakeCalls()
	reg := prometheus.NewRegistry()
	if err := reg.Register(f.comp); err != nil {
		t.Fatal(err)
	}
	// A master whose member does not answer exports that it has no leader
	// (and its snapshots, none here).
	if got := metricNames(t, reg); !slices.Equal(got, []string{"harmony_agent_etcd_has_leader", "harmony_agent_etcd_is_leader",
		"harmony_agent_etcd_is_learner", "harmony_agent_etcd_snapshot_copy_failures_total", "harmony_agent_etcd_snapshot_failures_total", "harmony_agent_etcd_snapshots"}) {
		t.Errorf("metrics of a silent member: %q", got)
	}
	r := f.role(t)
	r.Role = v1.RoleWorker
	st := f.pass(t, r)
	if st.Phase != reconcile.PhaseDisabled || !st.Healthy || !slices.Equal(st.Actions, []string{"stopped etcd"}) {
		t.Errorf("worker: %+v", st)
	}
	if calls := f.rec.TakeCalls(); !slices.Equal(calls, []string{"stop etcd"}) {
		t.Errorf("calls %q", calls)
	}
	if st := f.pass(t, r); len(st.Actions) != 0 || st.Phase != reconcile.PhaseDisabled {
		t.Errorf("second worker pass: %+v", st)
	}
	if got := metricNames(t, reg); len(got) != 0 {
		t.Errorf("a worker exports %q", got)
	}
}

func metricNames(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	return names
}

func TestConfigChecked(t *testing.T) {
	f := newFixture(t)
	f.comp = New(Config{ClientPort: 2380, DialContext: noNetwork})
	if st := f.pass(t, f.role(t)); st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "must differ") {
		t.Errorf("%+v", st)
	}
	f.comp = New(Config{Binary: "etcd", DialContext: noNetwork})
	if st := f.pass(t, f.role(t)); st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "Binary") {
		t.Errorf("%+v", st)
	}
}

// A role that wants the data disk starts no member on a data directory
// that is not a mount point; mounted (here a bind mount, as the lab's
// bodies get), it starts one.
func TestNoMemberOffTheDataDisk(t *testing.T) {
	f := newFixture(t)
	r := cloneRole(f.role(t))
	r.Etcd = &v1.EtcdSettings{DataDir: DefaultDataDir, DataDisk: true}
	st := f.pass(t, r)
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "not the data disk's mount") {
		t.Fatalf("unmounted data directory: %+v", st)
	}
	if calls := f.rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("calls with the data disk missing: %q", calls)
	}
	if os.Geteuid() != 0 {
		t.Skip("the mounted case needs root")
	}
	dir := f.host.Path(DefaultDataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(t.TempDir(), dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, 0)
	if st := f.pass(t, r); st.Phase != reconcile.PhaseConverged || !slices.Contains(st.Actions, "started etcd") {
		t.Errorf("mounted data directory: %+v", st)
	}
}
