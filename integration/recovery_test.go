package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/backup"
	"github.com/harmonykaas/harmony/controller/etcdcopies"
	"github.com/harmonykaas/harmony/controller/store"
	"github.com/harmonykaas/harmony/internal/etcdsnapshot"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// The README's "Backup and restore", with the real binaries: a backup of
// the running controller; the node deleted by mistake, so the agent is
// told its node is gone; then the store emptied and the etcd snapshot
// copies removed by an operator's slip. The controller refuses to start
// on the empty store, naming the file; harmony-controller restore brings
// the backup back, copies too; and the agent, untouched, takes its place
// again on its own.
func TestAgentReconnectsAfterRestoreFromBackup(t *testing.T) {
	bin := binaries(t)
	dir := t.TempDir()
	port := freePort(t)
	dataDir := filepath.Join(dir, "controller")
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	env := []string{"HARMONY_CONFIG=" + filepath.Join(dataDir, "admin.conf")}
	harmonyctl, controllerBin := filepath.Join(bin, "harmonyctl"), filepath.Join(bin, "harmony-controller")

	ctl := testutil.StartProc(t, controllerBin, nil, "serve", "--data-dir", dataDir, "--listen", listen)
	ctl.WaitLog(t, "controller serving")
	bootFile := filepath.Join(dir, "w1.json")
	if _, stderr, err := run(t, env, harmonyctl, "node", "add", "w1", "--cluster", "demo", "--role", "worker", "--ip", "127.0.0.1", "-o", bootFile); err != nil {
		t.Fatalf("node add: %v\n%s", err, stderr)
	}
	agent := testutil.StartProc(t, filepath.Join(bin, "harmony-agent"), nil, "--bootstrap-file", bootFile,
		"--state-dir", filepath.Join(dir, "agent"), "--address", "127.0.0.1", "--metrics-listen", "", "--no-guestinfo",
		"--retry-max", "1s", "--refused-retry-max", "2s", "--watch-wait", "5s")
	agent.WaitLog(t, "new role revision", "revision=1")

	// A copy of a cluster's etcd snapshot, as a master's agent sends it.
	copies, err := etcdcopies.Open(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := testutil.EtcdSnapshot(t, 3)
	takenAt := time.Now().UTC().Truncate(time.Second)
	if _, err := copies.Put(etcdcopies.Cluster{Name: "demo", UID: "0123456789abcdef"}, takenAt, bytes.NewReader(snapshot), int64(len(snapshot)), etcdcopies.Rule{Keep: 3}, nil); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dataDir, etcdcopies.Dir, v1.ClusterInstance("demo", "0123456789abcdef"), etcdsnapshot.Name(takenAt))

	backupFile := filepath.Join(dir, "backup.tar")
	if _, stderr, err := run(t, nil, controllerBin, "backup", "--data-dir", dataDir, "-o", backupFile, "--etcd-snapshots", "some"); err == nil || !strings.Contains(stderr, "--etcd-snapshots") {
		t.Fatalf("backup --etcd-snapshots some: %v\n%s", err, stderr)
	}
	_, stderr, err := run(t, nil, controllerBin, "backup", "--data-dir", dataDir, "-o", backupFile)
	if err != nil || !strings.Contains(stderr, "1 nodes") || !strings.Contains(stderr, fmt.Sprintf("1 etcd snapshot copies (%d bytes)", len(snapshot))) {
		t.Fatalf("backup of the running controller: %v\n%s", err, stderr)
	}
	if fileMode(t, backupFile) != 0o600 {
		t.Fatalf("backup file mode %04o", fileMode(t, backupFile))
	}

	if _, stderr, err := run(t, env, harmonyctl, "node", "delete", "w1"); err != nil {
		t.Fatalf("node delete: %v\n%s", err, stderr)
	}
	agent.WaitLog(t, "reason=node_gone")
	agent.WaitLog(t, "no longer accepts this node's certificate", "retry_in=")

	ctl.Stop(t)
	// A stopped controller's backup is read from its files; a directory
	// of backups keeps the newest and nothing else goes.
	backups := filepath.Join(dir, "backups")
	if err := os.MkdirAll(backups, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(backups, "README"), []byte("off-site copies go out nightly\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, stderr, err := run(t, nil, controllerBin, "backup", "--data-dir", dataDir, "--output-dir", backups, "--keep", "2", "--etcd-snapshots", "none"); err != nil || !strings.Contains(stderr, "0 etcd snapshot copies") {
			t.Fatalf("backup of the stopped controller into a directory of backups: %v\n%s", err, stderr)
		}
	}
	kept, _ := filepath.Glob(filepath.Join(backups, "harmony-controller-*.backup"))
	if _, err := os.Stat(filepath.Join(backups, "README")); err != nil || len(kept) != 2 {
		t.Fatalf("the directory of backups holds %v, README %v; want the two newest and the README", kept, err)
	}
	for _, f := range kept {
		data, _ := os.ReadFile(f)
		if _, err := backup.Verify(bytes.NewReader(data)); err != nil || fileMode(t, f) != 0o600 {
			t.Fatalf("%s: %v, mode %04o", f, err, fileMode(t, f))
		}
	}
	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"-o", filepath.Join(dir, "x"), "--output-dir", backups}, "give one of -o FILE and --output-dir DIR"},
		{[]string{"-o", filepath.Join(dir, "x"), "--keep", "2"}, "--keep is for --output-dir"},
		{[]string{"--output-dir", backups, "--keep", "0"}, "--keep 0: keep at least 1"},
		{nil, "give one of -o FILE and --output-dir DIR"},
	} {
		if _, stderr, err := run(t, nil, controllerBin, append([]string{"backup", "--data-dir", dataDir}, bad.args...)...); err == nil || !strings.Contains(stderr, bad.says) {
			t.Fatalf("backup %q: %v, want %q\n%s", bad.args, err, bad.says, stderr)
		}
	}
	storePath := filepath.Join(dataDir, store.FileName)
	if err := os.Truncate(storePath, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dataDir, etcdcopies.Dir)); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = run(t, nil, controllerBin, "serve", "--data-dir", dataDir, "--listen", listen)
	if err == nil || !strings.Contains(stderr, storePath) || !strings.Contains(stderr, "harmony-controller restore") {
		t.Fatalf("serve on an empty store: err %v\n%s", err, stderr)
	}

	if _, stderr, err := run(t, nil, controllerBin, "restore", "--data-dir", dataDir, "-f", backupFile); err != nil {
		t.Fatalf("restore: %v\n%s", err, stderr)
	}
	replaced, _ := filepath.Glob(storePath + ".replaced-*")
	if len(replaced) != 1 {
		t.Fatalf("the damaged store was not kept beside: %v", replaced)
	}
	if got, err := os.ReadFile(copyPath); err != nil || !bytes.Equal(got, snapshot) || fileMode(t, copyPath) != 0o600 {
		t.Fatalf("the etcd snapshot copy after the restore: %d bytes, %v", len(got), err)
	}
	restoredAt := time.Now()
	ctl = testutil.StartProc(t, controllerBin, nil, "serve", "--data-dir", dataDir, "--listen", listen)
	ctl.WaitLog(t, "controller serving")

	// Nobody touches the agent: it tries its certificate again and is
	// accepted, and the controller has its status.
	agent.WaitLog(t, "the controller accepts this node's certificate again")
	eventually(t, "a status report after the restore", func() bool {
		out, _, err := run(t, env, harmonyctl, "node", "get", "w1")
		var n v1.Node
		return err == nil && json.Unmarshal([]byte(out), &n) == nil && n.Status != nil && n.Status.ReportedAt.After(restoredAt)
	})
	if strings.Count(agent.Out.String(), "msg=enrolling") != 1 {
		t.Fatalf("the agent enrolled again:\n%s", agent.Out.String())
	}
}

// A controller shutting down answers open role watches with 503: the
// agent takes it as a restart and says so quietly, where an empty 200
// used to be logged as a bad response.
func TestAgentTakesShutdownQuietly(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: t.TempDir(), WatchWait: 30 * time.Second})
	ra.waitRole(t, 1)
	eventually(t, "watch held", func() bool { return c.metric(t, "harmony_controller_role_watches_active") == 1 })
	c.stop()
	eventually(t, "the agent saw the restart", func() bool {
		return strings.Contains(ra.logs.String(), "the controller is restarting")
	})
	if strings.Contains(ra.logs.String(), "bad_response") || strings.Contains(ra.logs.String(), "controller sent an invalid role") {
		t.Fatalf("the agent took the shutdown for a bad answer:\n%s", ra.logs.String())
	}
}
