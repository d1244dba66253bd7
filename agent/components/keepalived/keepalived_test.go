package keepalived

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// netnsWithInterface makes a network namespace holding eth0 (one end of a
// veth pair) with addr, as a lab host has, because keepalived's own config
// test insists that the VRRP interface exists.
func netnsWithInterface(t *testing.T, addr string) string {
	t.Helper()
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Fatalf("keepalived is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	ns := testutil.VethNetns(t, "ka")
	testutil.IP(t, "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
	return ns
}

func inNetns(ns string) func(ctx context.Context, argv []string) *exec.Cmd {
	return func(ctx context.Context, argv []string) *exec.Cmd {
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	}
}

func masterRole(name string) *v1.Role {
	return &v1.Role{
		APIVersion: v1.APIVersion, Kind: "Role", NodeName: name, Role: v1.RoleMaster, Revision: 1,
		Cluster: v1.ClusterSettings{Name: "demo", VIP: "198.18.0.10", VRID: 51,
			LoadBalancer: v1.LoadBalancerSettings{VRRPPassword: "S3c._+-r"}}, // every kind of character a password may have
		Peers: []v1.Peer{
			{Name: "m3", Role: v1.RoleMaster, Address: "198.18.0.13", Rank: 2},
			{Name: "m1", Role: v1.RoleMaster, Address: "198.18.0.11", Rank: 0},
			{Name: "w1", Role: v1.RoleWorker, Address: "198.18.0.21"},
			{Name: "m2", Role: v1.RoleMaster, Address: "198.18.0.12", Rank: 1},
		},
	}
}

type fixture struct {
	host *reconcile.Host
	rec  *servicetest.Recorder
	comp *Component
}

func newFixture(t *testing.T, ns string) *fixture {
	t.Helper()
	rec := servicetest.New()
	return &fixture{
		host: &reconcile.Host{Root: t.TempDir(), Services: rec, Facts: reconcile.Facts{Interface: "eth0"},
			Log: slog.New(slog.DiscardHandler)},
		rec:  rec,
		comp: New(Config{TrackScript: []string{"/bin/true"}, Command: inNetns(ns)}),
	}
}

func TestRendersUnicastVRRPByRankAndPassesKeepalivedCheck(t *testing.T) {
	ns := netnsWithInterface(t, "198.18.0.12")
	f := newFixture(t, ns)
	st := f.comp.Reconcile(context.Background(), f.host, masterRole("m2"))
	if st.Phase != reconcile.PhaseConverged || !st.Healthy {
		t.Fatalf("status %+v", st)
	}
	path := f.host.Path(ConfigPath)
	conf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(conf)
	for _, want := range []string{
		"virtual_router_id 51",
		"priority 190", // rank 1
		"unicast_src_ip 198.18.0.12",
		"unicast_peer {\n        198.18.0.11\n        198.18.0.13\n    }", // the other masters, by rank
		"auth_pass S3c._+-r\n", // all of it: nothing keepalived reads as syntax
		"198.18.0.10/32 dev eth0",
		`script "/bin/true"`,
		"interface eth0",
		"vrrp_version 2",
		"advert_int 1\n",
		"check_unicast_src",
		"    nopreempt\n",
		"    fall 2\n    rise 5\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("config lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "198.18.0.21") {
		t.Error("a worker became a VRRP peer")
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("config holding the VRRP password has mode %04o", info.Mode().Perm())
	}
	u, ok := f.rec.Unit("keepalived")
	if !ok || !slices.Contains(u.Command, path) || !slices.Contains(u.Command, "--dont-fork") {
		t.Fatalf("unit %+v", u)
	}
}

// VRRPv3, when the role asks for it: adverts as often as it says, no
// authentication (keepalived refuses a v3 instance with one), adverts
// from the other masters only; keepalived's own check passes.
func TestRendersVRRPv3WithItsAdvertIntervalAndNoPassword(t *testing.T) {
	ns := netnsWithInterface(t, "198.18.0.12")
	f := newFixture(t, ns)
	role := masterRole("m2")
	role.Cluster.LoadBalancer.VRRPVersion, role.Cluster.LoadBalancer.AdvertInterval = 3, "300ms"
	st := f.comp.Reconcile(context.Background(), f.host, role)
	if st.Phase != reconcile.PhaseConverged || !st.Healthy {
		t.Fatalf("status %+v", st)
	}
	conf, err := os.ReadFile(f.host.Path(ConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	text := string(conf)
	for _, want := range []string{"vrrp_version 3", "advert_int 0.3\n", "check_unicast_src", "unicast_peer {\n        198.18.0.11\n        198.18.0.13\n    }"} {
		if !strings.Contains(text, want) {
			t.Errorf("config lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "auth_pass") || strings.Contains(text, "authentication") {
		t.Errorf("a VRRPv3 config with authentication:\n%s", text)
	}
}

func TestSecondPassChangesNothingAndAChangeOnlyReloads(t *testing.T) {
	ns := netnsWithInterface(t, "198.18.0.11")
	f := newFixture(t, ns)
	ctx := context.Background()
	role := masterRole("m1")
	if st := f.comp.Reconcile(ctx, f.host, role); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("first pass %+v", st)
	}
	if calls := f.rec.TakeCalls(); !slices.Equal(calls, []string{"ensure keepalived"}) {
		t.Fatalf("first pass calls %v", calls)
	}
	info, _ := os.Stat(f.host.Path(ConfigPath))
	st := f.comp.Reconcile(ctx, f.host, role)
	if len(st.Actions) != 0 {
		t.Fatalf("second pass acted: %v", st.Actions)
	}
	if calls := f.rec.TakeCalls(); len(calls) != 0 {
		t.Fatalf("second pass called the service manager: %v", calls)
	}
	if again, _ := os.Stat(f.host.Path(ConfigPath)); !again.ModTime().Equal(info.ModTime()) {
		t.Fatal("second pass rewrote the config")
	}

	role.Cluster.LoadBalancer.VRRPPassword = "n3w-pw"
	st = f.comp.Reconcile(ctx, f.host, role)
	if calls := f.rec.TakeCalls(); !slices.Equal(calls, []string{"reload keepalived"}) {
		t.Fatalf("a changed password made calls %v, want one reload", calls)
	}
	if !slices.Contains(st.Actions, "reloaded keepalived") {
		t.Fatalf("actions %v", st.Actions)
	}
}

func TestRefusedCandidateLeavesTheRunningConfig(t *testing.T) {
	ns := netnsWithInterface(t, "198.18.0.11")
	f := newFixture(t, ns)
	ctx := context.Background()
	if st := f.comp.Reconcile(ctx, f.host, masterRole("m1")); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("first pass %+v", st)
	}
	before, _ := os.ReadFile(f.host.Path(ConfigPath))
	f.rec.TakeCalls()

	// keepalived itself refuses a track script it cannot run.
	broken := New(Config{TrackScript: []string{"/nonexistent/check"}, Command: inNetns(ns)})
	role := masterRole("m1")
	role.Cluster.VRID = 52
	st := broken.Reconcile(ctx, f.host, role)
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "refused") {
		t.Fatalf("status %+v, want a refusal", st)
	}
	after, _ := os.ReadFile(f.host.Path(ConfigPath))
	if !bytes.Equal(before, after) {
		t.Fatal("a refused candidate replaced the config")
	}
	if calls := f.rec.TakeCalls(); len(calls) != 0 {
		t.Fatalf("a refused candidate touched the service: %v", calls)
	}
	entries, _ := os.ReadDir(filepath.Dir(f.host.Path(ConfigPath)))
	if len(entries) != 1 {
		t.Fatalf("candidate files left behind: %v", entries)
	}
}

func TestMissingInputsFailClearly(t *testing.T) {
	f := newFixture(t, "unused")
	for field, mutate := range map[string]func(*v1.Role){
		"cluster.vip":   func(r *v1.Role) { r.Cluster.VIP = "" },
		"cluster.vrid":  func(r *v1.Role) { r.Cluster.VRID = 0 },
		"vrrpPassword":  func(r *v1.Role) { r.Cluster.LoadBalancer.VRRPPassword = "" },
		"not among the": func(r *v1.Role) { r.Peers = r.Peers[:1] },
	} {
		role := masterRole("m1")
		mutate(role)
		st := f.comp.Reconcile(context.Background(), f.host, role)
		if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, field) {
			t.Errorf("%s: status %+v", field, st)
		}
	}
	if _, err := os.Stat(f.host.Path(ConfigPath)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a config was written from incomplete inputs")
	}
}

func TestWorkersRunNoKeepalived(t *testing.T) {
	ns := netnsWithInterface(t, "198.18.0.11")
	f := newFixture(t, ns)
	ctx := context.Background()
	f.comp.Reconcile(ctx, f.host, masterRole("m1"))
	f.rec.TakeCalls()
	worker := masterRole("m1")
	worker.Role = v1.RoleWorker
	st := f.comp.Reconcile(ctx, f.host, worker)
	if st.Phase != reconcile.PhaseDisabled || !slices.Equal(f.rec.TakeCalls(), []string{"stop keepalived"}) {
		t.Fatalf("status %+v", st)
	}
	if st = f.comp.Reconcile(ctx, f.host, worker); st.Phase != reconcile.PhaseDisabled || len(st.Actions) != 0 {
		t.Fatalf("second disabled pass %+v", st)
	}
}

func TestTrackScriptArgumentsThatNeedQuotingAreRefused(t *testing.T) {
	for _, argv := range [][]string{{"/bin/check", ""}, {"/bin/check", "a b"}, {"/bin/check", `"x"`}} {
		c := New(Config{TrackScript: argv})
		host := &reconcile.Host{Root: t.TempDir(), Services: servicetest.New(), Facts: reconcile.Facts{Interface: "eth0"}}
		st := c.Reconcile(context.Background(), host, masterRole("m1"))
		if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "cannot be passed to keepalived") {
			t.Errorf("argv %q: status %+v", argv, st)
		}
	}
}

// The agent may die after writing a new config and before reloading
// keepalived, which keeps running. The next agent must still reload it.
func TestReloadOwedBeforeACrashIsDoneByTheNextAgent(t *testing.T) {
	ns := netnsWithInterface(t, "198.18.0.11")
	f := newFixture(t, ns)
	ctx := context.Background()
	f.comp.Reconcile(ctx, f.host, masterRole("m1"))
	f.rec.TakeCalls()
	// What the dead agent left: the new file written, the reload owed.
	if err := f.host.ReloadMarker("keepalived").Set(); err != nil {
		t.Fatal(err)
	}
	next := New(Config{TrackScript: []string{"/bin/true"}, Command: inNetns(ns)})
	st := next.Reconcile(ctx, f.host, masterRole("m1"))
	if calls := f.rec.TakeCalls(); !slices.Equal(calls, []string{"reload keepalived"}) {
		t.Fatalf("calls %v, want the owed reload", calls)
	}
	if f.host.ReloadMarker("keepalived").Pending() || !slices.Contains(st.Actions, "reloaded keepalived") {
		t.Fatalf("reload not recorded as done: %+v", st)
	}
	if st := next.Reconcile(ctx, f.host, masterRole("m1")); len(st.Actions) != 0 {
		t.Fatalf("third pass acted: %v", st.Actions)
	}
}

func TestSingleMasterPassesKeepalivedCheck(t *testing.T) {
	ns := netnsWithInterface(t, "198.18.0.11")
	f := newFixture(t, ns)
	role := masterRole("m1")
	role.Peers = []v1.Peer{{Name: "m1", Role: v1.RoleMaster, Address: "198.18.0.11"}}
	st := f.comp.Reconcile(context.Background(), f.host, role)
	if st.Phase != reconcile.PhaseConverged {
		t.Fatalf("single master: %+v", st)
	}
	conf, _ := os.ReadFile(f.host.Path(ConfigPath))
	if strings.Contains(string(conf), "unicast_peer {") || !strings.Contains(string(conf), "priority 200") {
		t.Fatalf("single-master config:\n%s", conf)
	}
}
