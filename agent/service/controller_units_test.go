package service

import (
	"archive/tar"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/internal/testutil"
)

// TestControllerUnitsBackUpAndRestore runs the control-plane image's
// controller and backup units as shipped, hardening and all, under the
// test's systemd (the binary's path aside): the backup of the running
// controller, a dynamic user's, asked over its local socket, which serves
// root only, and then of the stopped one, read from its files, each land
// in the backups' directory, 0600 in a 0700 directory; the controller
// starts again on what a root restore wrote; and a store it may not read
// is said to be that, not damage.
func TestControllerUnitsBackUpAndRestore(t *testing.T) {
	sd := bootSystemdWith(t, true)
	m := sd.manager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	hostBin := testutil.Binary(t, "harmony-controller", "github.com/harmonykaas/harmony/cmd/harmony-controller")
	bin, err := os.ReadFile(hostBin)
	if err != nil {
		t.Fatal(err)
	}
	const testBin = "/run/harmony-test/harmony-controller"
	mustMkdir(t, filepath.Join(sd.root, filepath.Dir(testBin)))
	writeFile(t, filepath.Join(sd.root, testBin), string(bin), 0o755)
	for _, u := range []string{"harmony-controller.service", "harmony-controller-backup.service"} {
		text, err := os.ReadFile(filepath.Join("../../systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		unit := strings.ReplaceAll(string(text), "/usr/local/bin/harmony-controller", testBin)
		// No journald here: what the unit says goes to a file to show.
		unit = strings.Replace(unit, "[Service]\n", "[Service]\nStandardOutput=append:/run/harmony-test/"+u+".log\nStandardError=append:/run/harmony-test/"+u+".log\n", 1)
		writeFile(t, filepath.Join(sd.root, "etc/systemd/system", u), unit, 0o644)
	}
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
}
