package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/staticnet"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// fakeRPCTool stands in for open-vm-tools' vmware-rpctool, which only
// answers inside a VMware VM: "info-get KEY" prints the file STORE/KEY,
// or "No value found" and exits 1, as the real tool does for an unset key.
const fakeRPCTool = `#!/bin/sh
case "$1" in
"info-get "*)
	key=${1#info-get }
	if [ -f 'STORE'/"$key" ]; then cat 'STORE'/"$key"; echo; exit 0; fi
	echo "No value found"; exit 1 ;;
esac
echo "Unknown command"; exit 1
`

// agentBinary is $HARMONY_BIN/harmony-agent (make test builds it), else a
// fresh build.
func agentBinary(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("HARMONY_BIN"); dir != "" {
		return filepath.Join(dir, "harmony-agent")
	}
	bin := filepath.Join(t.TempDir(), "harmony-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build harmony-agent: %v\n%s", err, out)
	}
	return bin
}

// TestNetworkApplyProcess runs `harmony-agent network apply` as a process
// that finds the stand-in vmware-rpctool first on PATH, as on a node with
// open-vm-tools, and writes under --root.
func TestNetworkApplyProcess(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh for the vmware-rpctool stand-in")
	}
	bin := agentBinary(t)
	toolDir, store := t.TempDir(), t.TempDir()
	script := strings.ReplaceAll(fakeRPCTool, "STORE", store)
	if err := os.WriteFile(filepath.Join(toolDir, "vmware-rpctool"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	run := func(t *testing.T) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, "network", "apply", "--root", root)
		cmd.Env = append(os.Environ(), "PATH="+toolDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if strings.Contains(out.String(), "VMware backdoor") {
			t.Skip("on VMware the agent reads guestinfo through the backdoor, not the stand-in")
		}
		if !strings.Contains(out.String(), "via=vmware-rpctool") {
			t.Fatalf("guestinfo not read through vmware-rpctool:\n%s", out.String())
		}
		return out.String(), err
	}
	setKey := func(t *testing.T, value string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(store, v1.NetworkGuestinfoKey), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	networkFile := filepath.Join(root, staticnet.NetworkFile)

	t.Run("absent", func(t *testing.T) {
		out, err := run(t)
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(root, "etc")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("wrote under the root without a key (%v)\n%s", err, out)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		bad := `{"apiVersion":"harmony.dev/v1","kind":"NetworkConfig","address":"198.18.10.21/24","gateway":"198.18.99.1","hostname":"w-1"}`
		setKey(t, base64.StdEncoding.EncodeToString([]byte(bad)))
		out, err := run(t)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("exit %v, want 1\n%s", err, out)
		}
		if !strings.Contains(out, "field=gateway") || !strings.Contains(out, "198.18.99.1") {
			t.Fatalf("the log does not name the field:\n%s", out)
		}
		if _, err := os.Stat(filepath.Join(root, "etc")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("wrote under the root from an invalid value (%v)", err)
		}
	})

	t.Run("valid", func(t *testing.T) {
		cfg := &v1.NetworkConfig{APIVersion: v1.APIVersion, Kind: "NetworkConfig",
			Address: "198.18.10.21/24", Gateway: "198.18.10.1", DNS: []string{"198.18.10.53"}, Hostname: "w-1"}
		enc, err := cfg.EncodeGuestinfo()
		if err != nil {
			t.Fatal(err)
		}
		setKey(t, enc)
		out, err := run(t)
		if err != nil || !strings.Contains(out, "outcome=written") {
			t.Fatalf("exit %v\n%s", err, out)
		}
		want, err := staticnet.Render(cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(networkFile)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("network file (%v):\n%s\nwant:\n%s", err, got, want)
		}
		if h, _ := os.ReadFile(filepath.Join(root, staticnet.HostnameFile)); string(h) != "w-1\n" {
			t.Errorf("hostname file %q", h)
		}
		before, _ := os.Stat(networkFile)
		out, err = run(t)
		if err != nil || !strings.Contains(out, "outcome=unchanged") {
			t.Fatalf("rerun: exit %v\n%s", err, out)
		}
		if after, _ := os.Stat(networkFile); !after.ModTime().Equal(before.ModTime()) {
			t.Error("rerun rewrote the file")
		}
	})
}
