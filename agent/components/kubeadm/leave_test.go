package kubeadm

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// A master told to leave stops the stand-in apiserver and runs the real
// kubeadm reset under its root: kubeadm's files and the agent's kubeadm
// configurations go, the agent-managed etcd's data directory stays. A
// second leave, also by a new agent, acts on nothing.
func TestMasterLeaveResets(t *testing.T) {
	bin := k8sBin(t)
	ctx := context.Background()
	rec := servicetest.New()
	root := t.TempDir()
	host := &reconcile.Host{Root: root, Services: rec, Log: slog.New(slog.DiscardHandler)}
	// Only reset goes through Unconfined (on a node, systemd-run), with
	// the command timeout as its bound; this wrapper notes what it ran.
	unconfined := filepath.Join(t.TempDir(), "unconfined")
	newComponent := func() *Component {
		return New(Config{Binary: filepath.Join(bin, "kubeadm"), APIServerBinary: filepath.Join(bin, "kube-apiserver"),
			StandInForKubelet: true, DialContext: refuseDial, CommandTimeout: 90 * time.Second,
			Unconfined: func(argv []string, maxRuntime time.Duration) []string {
				script := fmt.Sprintf(`echo "%s $*" >> %s && exec "$@"`, maxRuntime, unconfined)
				return append([]string{"sh", "-c", script, "sh"}, argv...)
			}})
	}
	c := newComponent()
	role := newTestCluster(t).role(t, "m1", 0)
	if st := c.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("converge: %+v", st)
	}
	if _, ok := rec.Unit(APIServerUnit); !ok {
		t.Fatal("no stand-in apiserver before leaving")
	}
	etcdData := host.Path("/var/lib/etcd/member/wal/0.wal")
	if err := os.MkdirAll(filepath.Dir(etcdData), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(etcdData, []byte("wal"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec.TakeCalls()

	leave := *role
	leave.Leave = &v1.LeaveSettings{Deadline: time.Now().Add(time.Minute)}
	st := c.Leave(ctx, host, &leave)
	want := []string{"stopped " + APIServerUnit, "ran kubeadm reset", "removed " + ConfigDir, "removed " + StateDir}
	if st.Phase != reconcile.PhaseLeft || !st.Healthy || !slices.Equal(st.Actions, want) {
		t.Fatalf("leave: %+v, want actions %q", st, want)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"stop " + APIServerUnit}) {
		t.Errorf("unit calls %q", calls)
	}
	ran, _ := os.ReadFile(unconfined)
	if want := fmt.Sprintf("1m30s %s --rootfs %s reset --force --skip-phases=remove-etcd-member --cleanup-tmp-dir\n", filepath.Join(bin, "kubeadm"), root); string(ran) != want {
		t.Errorf("unconfined commands:\n%q\nwant\n%q", ran, want)
	}
	for _, gone := range []string{APIServerManifest, CACertFile, "/etc/kubernetes/admin.conf", InitConfigFile, LocalKubeconfig} {
		if _, err := os.Stat(host.Path(gone)); err == nil {
			t.Errorf("%s survived the reset", gone)
		}
	}
	if _, err := os.Stat(etcdData); err != nil {
		t.Errorf("the reset touched etcd's data: %v", err)
	}
	if entries, _ := os.ReadDir(host.Path("/var/lib/etcd/member/wal")); len(entries) != 1 {
		t.Errorf("etcd's WAL directory holds %d files", len(entries))
	}

	for _, restart := range []bool{false, true} {
		if restart {
			c = newComponent()
		}
		again := c.Leave(ctx, host, &leave)
		if again.Phase != reconcile.PhaseLeft || len(again.Actions) != 0 || again.Message != st.Message {
			t.Errorf("leave again (new agent: %v): %+v", restart, again)
		}
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("leaving again touched units: %q", calls)
	}
}

// Where there is nothing to drain, the drain says why and lets the node
// leave at once; draining itself is tested against a real apiserver
// (checkDrain, in TestFirstMasterInNetns).
func TestDrainWithNothingToDrain(t *testing.T) {
	role := newTestCluster(t).role(t, "w1", 0)
	for _, tc := range []struct {
		kubelet bool
		want    string
	}{{false, "no kubelet on this host: nothing to cordon or drain"}, {true, "never joined (no /etc/kubernetes/kubelet.conf): nothing to drain"}} {
		st := New(Config{Kubelet: tc.kubelet}).Drain().Leave(context.Background(), &reconcile.Host{Root: t.TempDir()}, role)
		if st.Phase != reconcile.PhaseLeft || st.Message != tc.want {
			t.Errorf("kubelet %v: %+v", tc.kubelet, st)
		}
	}
}

// A master that hands over (an upgrade by reimage) stops its control plane
// and resets nothing: kubeadm's certificates, configurations and the
// etcd data stay. With a kubelet, the static pods' manifests leave its
// sight, and then the kubelet stops, so that the Node can be marked for
// the new VM; when the VM serves again (a rolled-back replacement), a pass
// starts the kubelet, makes the manifests afresh, and the held copies go.
func TestMasterHandOverResetsNothing(t *testing.T) {
	bin := k8sBin(t)
	ctx := context.Background()
	rec := servicetest.New()
	host := &reconcile.Host{Root: t.TempDir(), Services: rec, Log: slog.New(slog.DiscardHandler)}
	standIn := New(Config{Binary: filepath.Join(bin, "kubeadm"), APIServerBinary: filepath.Join(bin, "kube-apiserver"),
		StandInForKubelet: true, DialContext: refuseDial, CommandTimeout: 90 * time.Second})
	cl := newTestCluster(t)
	role := cl.role(t, "m2", 0)
	if st := standIn.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("converge: %+v", st)
	}
	before := snapshotFiles(t, host.Root)
	handOver := *role
	handOver.Leave = &v1.LeaveSettings{Deadline: time.Now().Add(time.Minute), HandOver: true}

	// The stand-in: its unit stops, and nothing else changes.
	st := standIn.Leave(ctx, host, &handOver)
	if st.Phase != reconcile.PhaseLeft || !st.Healthy || !slices.Equal(st.Actions, []string{"stopped " + APIServerUnit}) {
		t.Fatalf("stand-in hand-over: %+v", st)
	}
	if after := snapshotFiles(t, host.Root); !maps.Equal(before, after) {
		t.Errorf("the hand-over changed files: before %d, after %d", len(before), len(after))
	}

	// With a kubelet: the manifests are held aside; the local apiserver
	// (none answers here) is gone, so the kubelet stops and the hand-over
	// is done. No apiserver answers on the VIP either: the Node is not
	// marked, which is said, and does not hold the hand-over up.
	systemctl, calls := recordingSystemctl(t)
	withKubelet := New(Config{Binary: filepath.Join(bin, "kubeadm"), Kubelet: true, Systemctl: systemctl,
		DialContext: refuseDial, CommandTimeout: 90 * time.Second})
	st = withKubelet.Leave(ctx, host, &handOver)
	if st.Phase != reconcile.PhaseLeft || !st.Healthy || len(st.Actions) != 4 || st.Actions[3] != "stopped kubelet.service" ||
		!strings.Contains(st.Message, "Node not marked") {
		t.Fatalf("hand-over with a kubelet: %+v", st)
	}
	if got := calls(); !slices.Equal(got, []string{"stop kubelet.service"}) {
		t.Errorf("systemctl calls: %q", got)
	}
	for _, m := range controlPlaneManifests {
		if _, err := os.Stat(host.Path(filepath.Join(ManifestsDir, m))); err == nil {
			t.Errorf("%s still in the kubelet's sight", m)
		}
		if _, err := os.Stat(host.Path(filepath.Join(HandedOverDir, m))); err != nil {
			t.Errorf("%s not held: %v", m, err)
		}
	}
	for _, kept := range []string{CACertFile, AdminKubeconfig, InitConfigFile} {
		if _, err := os.Stat(host.Path(kept)); err != nil {
			t.Errorf("%s gone after the hand-over: %v", kept, err)
		}
	}
	// The next pass stops the kubelet again (a stop is a no-op on a
	// stopped unit) and tries the Node again, but reports no new action.
	if again := withKubelet.Leave(ctx, host, &handOver); again.Phase != reconcile.PhaseLeft || len(again.Actions) != 0 {
		t.Errorf("hand-over again: %+v", again)
	}

	// Rolled back: the VM serves again, and the kubelet the hand-over
	// stopped starts before anything else.
	role.Revision++
	st = reconcile.Status{}
	if err := withKubelet.restoreAfterHandOver(ctx, host, &st); err != nil {
		t.Fatal(err)
	}
	if want := []string{"started kubelet.service, which the hand-over had stopped", "removed " + HandedOverDir + ": this VM serves again"}; !slices.Equal(st.Actions, want) {
		t.Errorf("restore after the hand-over: %q, want %q", st.Actions, want)
	}
	if got := calls(); !slices.Equal(got, []string{"stop kubelet.service", "stop kubelet.service", "start kubelet.service"}) {
		t.Errorf("systemctl calls: %q", got)
	}

	// Handed over and rolled back again, on the stand-in's host: no
	// kubelet to start, and the local phases make the manifests anew.
	if st := withKubelet.Leave(ctx, host, &handOver); st.Phase != reconcile.PhaseLeft {
		t.Fatalf("second hand-over: %+v", st)
	}
	if st := standIn.Reconcile(ctx, host, role); st.Phase != reconcile.PhaseConverged || !slices.Contains(st.Actions, "removed "+HandedOverDir+": this VM serves again") ||
		slices.ContainsFunc(st.Actions, func(a string) bool { return strings.Contains(a, "kubelet") }) {
		t.Fatalf("converge after the rollback: %+v", st)
	}
	for _, m := range controlPlaneManifests {
		if _, err := os.Stat(host.Path(filepath.Join(ManifestsDir, m))); err != nil {
			t.Errorf("%s not made again: %v", m, err)
		}
	}
	if _, ok := rec.Unit(APIServerUnit); !ok {
		t.Error("the stand-in apiserver does not run again")
	}

	// The first master's new VM takes over without a join: its kubelet
	// keeps running until the power-off, and the Node is left alone.
	first := &reconcile.Host{Root: t.TempDir(), Services: servicetest.New(), Log: slog.New(slog.DiscardHandler)}
	m1 := cl.role(t, "m1", 0)
	if st := standIn.Reconcile(ctx, first, m1); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("converge m1: %+v", st)
	}
	m1.Leave = handOver.Leave
	callsBefore := len(calls())
	if st := withKubelet.Leave(ctx, first, m1); st.Phase != reconcile.PhaseLeft || !st.Healthy || strings.Contains(st.Message, "kubelet") ||
		slices.ContainsFunc(st.Actions, func(a string) bool { return strings.Contains(a, "kubelet.service") }) {
		t.Errorf("the first master's hand-over: %+v", st)
	}
	if got := calls(); len(got) != callsBefore {
		t.Errorf("systemctl calls after the first master's hand-over: %q", got[callsBefore:])
	}
}

// recordingSystemctl is a systemctl that only records its arguments, one
// call per line: no test may stop or start this machine's units.
func recordingSystemctl(t *testing.T) (string, func() []string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "systemctl")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$*\" >> "+log+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return script, func() []string {
		data, err := os.ReadFile(log)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if out := strings.TrimSpace(string(data)); out != "" {
			return strings.Split(out, "\n")
		}
		return nil
	}
}
