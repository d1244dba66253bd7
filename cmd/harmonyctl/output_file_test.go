package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/controllertest"
)

// The output paths of the commands, through the commands, against a real
// controller on a loopback port. Every path is in t.TempDir(): a test
// pointed at the real /dev/null once replaced it with a regular file.

// startTestController runs a controller in a temporary directory and returns
// the globals of a harmonyctl that talks to it as admin.
func startTestController(t *testing.T) (*globals, *client.Client) {
	t.Helper()
	tc := controllertest.Start(t)
	return &globals{config: tc.AdminConfig, server: tc.URL()}, tc.Admin
}

func nodeAdd(g *globals, name, out string) (string, error) {
	var stdout strings.Builder
	cmd := nodeAddCommand(g)
	cmd.SetOut(&stdout)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{name, "--cluster", "c1", "--role", "worker", "--ip", "198.18.0.1", "-o", out})
	err := cmd.ExecuteContext(context.Background())
	return stdout.String(), err
}

func decodeBootstrap(t *testing.T, data []byte) v1.Bootstrap {
	t.Helper()
	var b v1.Bootstrap
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatalf("bootstrap document %q: %v", data, err)
	}
	if b.Token == "" {
		t.Fatalf("bootstrap document without a token: %q", data)
	}
	return b
}

func TestBootstrapOutputPaths(t *testing.T) {
	g, admin := startTestController(t)
	dir := t.TempDir()

	t.Run("device", func(t *testing.T) {
		dev := filepath.Join(dir, "null")
		if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			if errors.Is(err, unix.EPERM) {
				t.Skipf("mknod needs root: %v", err)
			}
			t.Fatal(err)
		}
		var before, after unix.Stat_t
		if err := unix.Lstat(dev, &before); err != nil {
			t.Fatal(err)
		}
		if _, err := nodeAdd(g, "n-dev", dev); err != nil {
			t.Fatal(err)
		}
		if err := unix.Lstat(dev, &after); err != nil {
			t.Fatal(err)
		}
		if after.Mode != before.Mode || after.Rdev != before.Rdev || after.Ino != before.Ino {
			t.Errorf("device changed: mode %o rdev %d ino %d, was %o %d %d",
				after.Mode, after.Rdev, after.Ino, before.Mode, before.Rdev, before.Ino)
		}
	})

	t.Run("symlink to a regular file", func(t *testing.T) {
		target := filepath.Join(dir, "n1.json")
		if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "bootstrap.json")
		if err := os.Symlink("n1.json", link); err != nil {
			t.Fatal(err)
		}
		if _, err := nodeAdd(g, "n1", link); err != nil {
			t.Fatal(err)
		}
		// node token writes through the same link.
		cmd := nodeTokenCommand(g)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"n1", "-o", link})
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if info, err := os.Lstat(link); err != nil || info.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("the link was replaced: %v %v", info, err)
		}
		info, err := os.Stat(target)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode() != 0o600 {
			t.Errorf("target mode %v, want 0600", info.Mode())
		}
		data, _ := os.ReadFile(target)
		if b := decodeBootstrap(t, data); b.NodeName != "n1" {
			t.Errorf("document for %q", b.NodeName)
		}
	})

	t.Run("stdout", func(t *testing.T) {
		t.Chdir(t.TempDir()) // a file named "-" would land here
		out, err := nodeAdd(g, "n-stdout", "-")
		if err != nil {
			t.Fatal(err)
		}
		decodeBootstrap(t, []byte(out))
		if _, err := os.Lstat("-"); err == nil {
			t.Error(`a file named "-" was written`)
		}
	})

	// A directory is refused before the node is created, so that no token
	// is issued that could not be written.
	t.Run("directory", func(t *testing.T) {
		_, err := nodeAdd(g, "n-dir", dir)
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("err = %v, want a refusal naming %s", err, dir)
		}
		var apiErr *client.APIError
		_, err = admin.Node(context.Background(), "n-dir")
		if !errors.As(err, &apiErr) || apiErr.Status != 404 {
			t.Errorf("node n-dir after a refused -o: %v, want 404", err)
		}
		cmd := nodeTokenCommand(g)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"n1", "-o", dir})
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("node token -o DIR: %v", err)
		}
	})
}

func TestCertScraperOutDir(t *testing.T) {
	g, _ := startTestController(t)
	dir := t.TempDir()
	scraper := func(outDir string) error {
		cmd := certScraperCommand(g)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"prom", "--out-dir", outDir})
		return cmd.ExecuteContext(context.Background())
	}

	// A symlink to a directory is followed; the link stays.
	realDir := filepath.Join(dir, "real")
	if err := os.Mkdir(realDir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "certs")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	if err := scraper(link); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Lstat(link); err != nil || info.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", info, err)
	}
	for name, perm := range map[string]os.FileMode{"prom.key": 0o600, "prom.crt": 0o644, "ca.crt": 0o644} {
		info, err := os.Lstat(filepath.Join(realDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !info.Mode().IsRegular() || info.Mode().Perm() != perm {
			t.Errorf("%s: mode %v, want %v", name, info.Mode(), perm)
		}
	}

	// A regular file is refused by name and left alone.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := scraper(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("--out-dir FILE: %v, want a refusal naming it", err)
	}
	if data, _ := os.ReadFile(file); string(data) != "keep" {
		t.Errorf("the file was changed: %q", data)
	}

	// A missing directory is made.
	fresh := filepath.Join(dir, "new", "certs")
	if err := scraper(fresh); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(fresh, "prom.key")); err != nil {
		t.Error(err)
	}
}
