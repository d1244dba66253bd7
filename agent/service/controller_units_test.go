package service

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/internal/testutil"
)

// TestControllerUnitsBackUpAndRestore runs the control-plane image's
// controller, backup and data-disk units as shipped, hardening and all,
// under the test's systemd (the binaries' paths aside). The controller's
// state and its backups are on the data disk, bound there by
// harmony-data-disk.service with the image's drop-in (the test's disk is
// a file system mounted beforehand, as the lab's are). It checks: the
// backup of the running controller, a dynamic user's, asked over its
// local socket, which serves root only, and then of the stopped one, read
// from its files, each land in the backups' directory, 0600 in a 0700
// directory; the controller starts again on what a root restore wrote; a
// reimage (the system disk's directories gone, the data disk kept) comes
// back with the same CA; a store it may not read is said to be that, not
// damage; and when the data disk's unit fails the controller does not
// start.
func TestControllerUnitsBackUpAndRestore(t *testing.T) {
	sd := bootSystemdWith(t, true)
	m := sd.manager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const testBinDir = "/run/harmony-test"
	mustMkdir(t, filepath.Join(sd.root, testBinDir))
	hostBin := testutil.Binary(t, "harmony-controller", "github.com/harmonykaas/harmony/cmd/harmony-controller")
	for name, from := range map[string]string{
		"harmony-controller": hostBin,
		"harmony-agent":      testutil.Binary(t, "harmony-agent", "github.com/harmonykaas/harmony/cmd/harmony-agent"),
	} {
		bin, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(sd.root, testBinDir, name), string(bin), 0o755)
	}
	for _, u := range []string{"harmony-controller.service", "harmony-controller-backup.service",
		"harmony-data-disk.service", "harmony-data-disk.service.d/appliance.conf"} {
		text, err := os.ReadFile(filepath.Join("../../systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		unit := strings.ReplaceAll(string(text), "/usr/local/bin/", testBinDir+"/")
		// No journald here: what the unit says goes to a file to show.
		if !strings.Contains(u, ".d/") {
			unit = strings.Replace(unit, "[Service]\n", "[Service]\nStandardOutput=append:/run/harmony-test/"+u+".log\nStandardError=append:/run/harmony-test/"+u+".log\n", 1)
		}
		mustMkdir(t, filepath.Join(sd.root, "etc/systemd/system", filepath.Dir(u)))
		writeFile(t, filepath.Join(sd.root, "etc/systemd/system", u), unit, 0o644)
	}
	// The data disk: a file system of its own at the drop-in's --dir.
	const diskDir = "/var/lib/harmony-data"
	mustMkdir(t, filepath.Join(sd.root, diskDir))
	sd.inMounts(t, "mount", "-t", "tmpfs", "-o", "mode=0700", "harmony-test-data-disk", diskDir)
	disk := filepath.Join(sd.root, diskDir)
	c, err := m.bus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.daemonReload(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := m.job(ctx, c, startUnit, "harmony-controller.service"); err != nil {
		t.Fatalf("%v\n%s", err, sd.log)
	}
	said := func(unit string) string {
		out, _ := os.ReadFile(filepath.Join(sd.root, "run/harmony-test", unit+".log"))
		return string(out)
	}
	dataDir := filepath.Join(sd.root, "var/lib/private/harmony-controller")
	serving := func(times int) {
		t.Helper()
		for strings.Count(said("harmony-controller.service"), `msg="controller serving"`) < times {
			select {
			case <-ctx.Done():
				t.Fatalf("the controller is not serving: %s\nit said:\n%s", sd.systemctl("status", "harmony-controller"), said("harmony-controller.service"))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	serving(1)

	backups := filepath.Join(sd.root, "var/lib/harmony-controller-backups")
	backUp := func(want int) {
		t.Helper()
		if err := m.job(ctx, c, startUnit, "harmony-controller-backup.service"); err != nil {
			t.Fatalf("%v\nthe backup said:\n%s\nthe controller said:\n%s", err, said("harmony-controller-backup.service"), said("harmony-controller.service"))
		}
		files, _ := filepath.Glob(filepath.Join(backups, "harmony-controller-*.backup"))
		if len(files) != want {
			t.Fatalf("%d backups after the unit ran, want %d\n%s", len(files), want, sd.systemctl("status", "harmony-controller-backup"))
		}
		for _, f := range files {
			info, err := os.Stat(f)
			if err != nil || info.Mode().Perm() != 0o600 {
				t.Fatalf("%s: %v %v", f, info, err)
			}
			file, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			hdr, err := tar.NewReader(file).Next()
			file.Close()
			if err != nil || hdr.Name != "backup.json" {
				t.Fatalf("%s does not start as a backup: %v %v", f, hdr, err)
			}
		}
	}
	backUp(1)
	if err := m.job(ctx, c, stopUnit, "harmony-controller.service"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the names have milliseconds
	backUp(2)
	if info, err := os.Stat(backups); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v", backups, info, err)
	}

	// The README's restore, by root with the controller stopped: the
	// controller, its dynamic user, starts again on what root wrote.
	files, _ := filepath.Glob(filepath.Join(backups, "harmony-controller-*.backup"))
	if out, err := exec.CommandContext(ctx, hostBin, "restore", "--data-dir", dataDir, "-f", files[0], "--force").CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if err := m.job(ctx, c, startUnit, "harmony-controller.service"); err != nil {
		t.Fatal(err)
	}
	serving(2)

	// A reimage: a new system disk, where systemd's directories for the
	// controller and the bindings are not, and the same data disk.
	caBefore, err := os.ReadFile(filepath.Join(disk, "controller", "ca.crt"))
	if err != nil {
		t.Fatalf("the controller's CA is not on the data disk: %v", err)
	}
	if n, _ := filepath.Glob(filepath.Join(disk, "controller-backups", "harmony-controller-*.backup")); len(n) != 2 {
		t.Fatalf("%d backups on the data disk, want 2", len(n))
	}
	// The agent's state (here a stand-in for its key) is on the disk too.
	agentKey := filepath.Join(sd.root, "var/lib/harmony/agent.key")
	writeFile(t, agentKey, "the agent's key", 0o600)
	if _, err := os.Stat(filepath.Join(disk, "agent", "agent.key")); err != nil {
		t.Fatalf("the agent's state is not on the data disk: %v", err)
	}
	reimage := func() {
		t.Helper()
		if err := m.job(ctx, c, stopUnit, "harmony-data-disk.service"); err != nil {
			t.Fatal(err)
		}
		for _, target := range []string{"/var/lib/etcd", "/var/lib/private/harmony-controller", "/var/lib/harmony-controller-backups", "/var/lib/harmony"} {
			sd.inMounts(t, "umount", target)
		}
		for _, dir := range []string{"var/lib/private", "var/lib/harmony-controller", "var/lib/harmony-controller-backups", "var/lib/harmony"} {
			if err := os.RemoveAll(filepath.Join(sd.root, dir)); err != nil {
				t.Fatal(err)
			}
		}
	}
	reimage()
	if err := m.job(ctx, c, startUnit, "harmony-controller.service"); err != nil {
		t.Fatalf("%v\nthe data disk's unit said:\n%s", err, said("harmony-data-disk.service"))
	}
	serving(3)
	if key, err := os.ReadFile(agentKey); err != nil || string(key) != "the agent's key" {
		t.Fatalf("after a reimage the agent's state is not back: %q, %v", key, err)
	}
	caAfter, err := os.ReadFile(filepath.Join(sd.root, "var/lib/harmony-controller/ca.crt"))
	if err != nil || !bytes.Equal(caAfter, caBefore) {
		t.Fatalf("after a reimage the controller's CA is not the one it had (%v)", err)
	}
	backUp(3)

	// A store its user may not read is said to be that, not damage that
	// a restore would mend.
	if err := m.job(ctx, c, stopUnit, "harmony-controller.service"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dataDir, "harmony.db"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.job(ctx, c, startUnit, "harmony-controller.service"); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(said("harmony-controller.service"), "harmony.db: open /var/lib/harmony-controller/harmony.db: permission denied") {
		select {
		case <-ctx.Done():
			t.Fatalf("the controller on a store it may not read said:\n%s", said("harmony-controller.service"))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if strings.Contains(said("harmony-controller.service"), "is damaged") {
		t.Fatalf("a store the controller may not read was called damaged:\n%s", said("harmony-controller.service"))
	}

	// When the data disk's unit fails, the controller does not start. The
	// failure here is a binding's target that something else is mounted
	// at, not a missing disk: with no disk mounted the unit would look
	// for one among the machine's own disks.
	reimage()
	const other = "/var/lib/private/harmony-controller"
	mustMkdir(t, filepath.Join(sd.root, other))
	sd.inMounts(t, "mount", "-t", "tmpfs", "harmony-test-not-the-disk", other)
	if err := m.job(ctx, c, startUnit, "harmony-controller.service"); err == nil {
		t.Fatalf("the controller started when its data disk's unit failed:\n%s", sd.systemctl("status", "harmony-controller"))
	}
	if !strings.Contains(said("harmony-data-disk.service"), other+" is a mount point already") {
		t.Fatalf("the data disk's unit said:\n%s", said("harmony-data-disk.service"))
	}
	if _, err := os.Stat(filepath.Join(sd.root, other, "ca.crt")); err == nil {
		t.Fatal("the controller made a CA off its data disk")
	}
}

// inMounts runs a command in the test systemd's mount namespace.
func (sd *testSystemd) inMounts(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(sd.pid), "--mount", "--"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", args, err, out)
	}
}
