//go:build linux

package etcd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/bbolt"

	"github.com/harmonykaas/harmony/agent/pki"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// A real member in a network namespace snapshots on its schedule, keeps
// the newest, cleans up after a killed write, stops when told and keeps
// what it took; its newest snapshot restores with etcdctl and holds what
// was written before it.
func TestSnapshotsOfARealMember(t *testing.T) {
	needLab(t, "runs an etcd member")
	if _, err := os.Stat("/usr/bin/etcdctl"); err != nil {
		t.Fatalf("etcdctl is needed (Debian etcd-client): %v", err)
	}
	ctx := context.Background()
	id := labID(t)
	h := newLabHost(t, id, labSwitch(t, id), "m1", "198.18.34.11")
	now := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	h.comp = New(Config{DialContext: testutil.NetnsDialer(h.ns), Now: func() time.Time { return now }})
	h.reg = prometheus.NewRegistry()
	h.reg.MustRegister(h.comp)
	caPair := newCA(t, "etcd-ca")
	ca, err := pki.LoadCA(caPair)
	if err != nil {
		t.Fatal(err)
	}
	role := testRole(t, "m1", map[string]string{"m1": "198.18.34.11"}, caPair) // snapshots off
	eventually(t, 60*time.Second, "m1 healthy", func() error {
		if st := h.comp.Reconcile(ctx, h.host, role); !st.Healthy {
			return errors.New(st.Message)
		}
		return nil
	})
	if err := kvPut(ctx, h.client(t, ca), h.endpoint(), "written-before-the-snapshot", "kept"); err != nil {
		t.Fatal(err)
	}
	dir := h.host.Path(DefaultDataDir + "/" + SnapshotDir)
	pass := func(want ...string) {
		t.Helper()
		st := h.comp.Reconcile(ctx, h.host, role)
		if !st.Healthy || len(st.Actions) != len(want) {
			t.Fatalf("at %s: %+v, want actions starting %q", now.Format(time.TimeOnly), st, want)
		}
		for i, w := range want {
			if !strings.HasPrefix(st.Actions[i], w) {
				t.Fatalf("at %s: actions %q, want them to start %q", now.Format(time.TimeOnly), st.Actions, want)
			}
		}
	}
	stored := func() []string {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	// On, every hour, two kept: the first is taken at once.
	role.Etcd.Snapshots = &v1.EtcdSnapshots{Interval: "1h", Keep: 2}
	pass("took snapshot snapshot-20261129T010000Z.db (")
	for path, mode := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, filepath.Join(dir, "snapshot-20261129T010000Z.db"): 0o600} {
		if info, err := os.Stat(path); err != nil || info.Mode() != mode {
			t.Errorf("%s: %v, %v; want %v (it holds every secret of the cluster)", path, info.Mode(), err, mode)
		}
	}
	now = now.Add(59 * time.Minute)
	pass() // not yet due
	now = now.Add(time.Minute)
	pass("took snapshot snapshot-20261129T020000Z.db (")
	now = now.Add(time.Hour)
	pass("took snapshot snapshot-20261129T030000Z.db (", "removed snapshot snapshot-20261129T010000Z.db")
	if got, want := stored(), []string{"snapshot-20261129T020000Z.db", "snapshot-20261129T030000Z.db"}; !slices.Equal(got, want) {
		t.Fatalf("stored %q, want %q", got, want)
	}
	m := gather(t, h)
	if m["harmony_agent_etcd_snapshots"].value != 2 || m["harmony_agent_etcd_snapshot_newest_timestamp_seconds"].value != float64(now.Unix()) ||
		m["harmony_agent_etcd_snapshot_interval_seconds"].value != 3600 {
		t.Errorf("metrics %+v", m)
	}
	// The newest, last, is the status's etcdSnapshotAt.
	if got, want := h.comp.Snapshots(), []time.Time{now.Add(-time.Hour), now}; !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("the snapshots for the agent's status: %v, want %v", got, want)
	}

	// A write killed before its rename leaves a temporary file; the next
	// pass removes it, and nothing else.
	leftover := ".snapshot-20261129T040000Z.db.tmp-123"
	if err := os.WriteFile(filepath.Join(dir, leftover), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	pass("removed unfinished snapshot " + leftover)

	// A snapshot that cannot be written (a directory where it goes) is
	// reported, not a failed pass, and tried again 5 minutes later, not
	// at every pass.
	now = now.Add(time.Hour)
	blocker := filepath.Join(dir, "snapshot-"+now.Format("20060102T150405Z")+".db")
	if err := os.Mkdir(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	failing := func(wantFailures float64) {
		t.Helper()
		st := h.comp.Reconcile(ctx, h.host, role)
		if !st.Healthy || len(st.Actions) != 0 || !strings.Contains(st.Message, "; snapshot: take a snapshot: ") {
			t.Fatalf("at %s: %+v, want healthy, no action, and the failure in the message", now.Format(time.TimeOnly), st)
		}
		if got := failures(t, h); got != wantFailures {
			t.Fatalf("at %s: %v failures counted, want %v", now.Format(time.TimeOnly), got, wantFailures)
		}
	}
	failing(1)
	now = now.Add(4 * time.Minute)
	failing(1)
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	pass("took snapshot snapshot-20261129T040500Z.db (", "removed snapshot snapshot-20261129T020000Z.db")

	// An upgrade asks for a snapshot since its start: one is taken though
	// none is due, and once only. One from a few minutes before the start
	// answers it (the two clocks differ), and so does the one this agent
	// took for a start its clock has not reached.
	now = now.Add(30 * time.Minute) // 04:35, the newest from 04:05
	role.Etcd.SnapshotSince = now.Add(-10 * time.Minute)
	pass("took snapshot snapshot-20261129T043500Z.db (", "removed snapshot snapshot-20261129T030000Z.db")
	pass()
	role.Etcd.SnapshotSince = now.Add(3 * time.Minute)
	pass()
	now = now.Add(time.Minute)
	role.Etcd.SnapshotSince = now.Add(2 * time.Hour)
	pass("took snapshot snapshot-20261129T043600Z.db (", "removed snapshot snapshot-20261129T040500Z.db")
	now = now.Add(time.Minute)
	pass()
	role.Etcd.SnapshotSince = time.Time{}

	// Off: none is taken any more, and those taken stay.
	role.Etcd.Snapshots.Disabled = true
	now = now.Add(5 * time.Hour)
	pass()
	role.Etcd.SnapshotSince = now
	pass() // nor when asked
	if got := stored(); len(got) != 2 {
		t.Fatalf("stored %q after snapshots were turned off, want the two taken", got)
	}
	// No schedule, so no staleness alert: the interval goes.
	if m, ok := gather(t, h)["harmony_agent_etcd_snapshot_interval_seconds"]; ok {
		t.Errorf("snapshots off, yet the interval is exported: %+v", m)
	}

	// The newest restores with etcdctl, which checks the hash, and holds
	// the key written before it.
	newest := filepath.Join(dir, "snapshot-20261129T043600Z.db")
	restored := filepath.Join(t.TempDir(), "restored")
	restore(t, newest, restored)
	if !holdsKey(t, filepath.Join(restored, "member", "snap", "db"), "written-before-the-snapshot", "kept") {
		t.Error("the restored database does not hold the key written before the snapshot")
	}
	// A copy with one bit flipped is refused.
	data, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	damaged := filepath.Join(t.TempDir(), "damaged.db")
	if err := os.WriteFile(damaged, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := etcdctlRestore(damaged, filepath.Join(t.TempDir(), "r")); err == nil {
		t.Errorf("etcdctl restored a damaged snapshot: %s", out)
	}
}

// failures reads harmony_agent_etcd_snapshot_failures_total.
func failures(t *testing.T, h *labHost) float64 {
	t.Helper()
	return counter(t, h, "harmony_agent_etcd_snapshot_failures_total")
}

// counter reads the counter of that name.
func counter(t *testing.T, h *labHost, name string) float64 {
	t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no " + name)
	return 0
}

func restore(t *testing.T, snapshot, dataDir string) {
	t.Helper()
	if out, err := etcdctlRestore(snapshot, dataDir); err != nil {
		t.Fatalf("etcdctl snapshot restore %s: %v\n%s", snapshot, err, out)
	}
}

func etcdctlRestore(snapshot, dataDir string) ([]byte, error) {
	cmd := exec.Command("/usr/bin/etcdctl", "snapshot", "restore", snapshot, "--data-dir", dataDir)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	return cmd.CombinedOutput()
}

// holdsKey reports whether etcd's database at path has key with value in
// its key bucket (each entry a protobuf KeyValue, which holds both as
// they are).
func holdsKey(t *testing.T, path, key, value string) bool {
	t.Helper()
	db, err := bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	found := false
	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return errors.New("no key bucket")
		}
		return b.ForEach(func(_, v []byte) error {
			found = found || (bytes.Contains(v, []byte(key)) && bytes.Contains(v, []byte(value)))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
