package bootstrap_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/bootstrap"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// fakeRPCToolScript stands in for open-vm-tools' vmware-rpctool, which
// talks to the hypervisor over the VMware backdoor and so only works inside
// a VMware VM. Like the real tool it takes the whole command as one
// argument. Each guestinfo key is a file in STORE. "info-get KEY" prints
// the value, or "No value found" and exits 1 for an unset key;
// "info-set KEY VALUE" stores VALUE. The key guestinfo.fail simulates an
// RPC failure.
const fakeRPCToolScript = `#!/bin/sh
store='STORE'
cmd=$1
case "$cmd" in
"info-get guestinfo.fail")
	echo "Failed sending message to VMware."
	exit 1 ;;
"info-get "*)
	key=${cmd#info-get }
	if [ -f "$store/$key" ]; then
		cat "$store/$key"
		echo
		exit 0
	fi
	echo "No value found"
	exit 1 ;;
"info-set "*)
	rest=${cmd#info-set }
	key=${rest%% *}
	value=${rest#* }
	printf '%s' "$value" > "$store/$key" || exit 1
	exit 0 ;;
*)
	echo "Unknown command"
	exit 1 ;;
esac
`

// fakeRPCTool writes the stand-in vmware-rpctool into a temporary
// directory and returns it with the directory holding its keys.
func fakeRPCTool(t *testing.T) (bootstrap.RPCTool, string) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no /bin/sh to run the vmware-rpctool stand-in")
	}
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(dir, "vmware-rpctool")
	script := strings.Replace(fakeRPCToolScript, "STORE", store, 1)
	if err := os.WriteFile(tool, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bootstrap.RPCTool{Path: tool}, store
}

func TestRPCToolGet(t *testing.T) {
	ctx := context.Background()
	rt, store := fakeRPCTool(t)
	enc := docBase64(t, testDoc(t, "node-1"))
	if err := os.WriteFile(filepath.Join(store, v1.GuestinfoKey), []byte(enc), 0o600); err != nil {
		t.Fatal(err)
	}

	got, err := rt.Get(ctx, v1.GuestinfoKey)
	if err != nil || got != enc {
		t.Fatalf("Get = %q, %v; want the stored value without the newline", got, err)
	}
	got, err = rt.Get(ctx, "guestinfo.unset")
	if err != nil || got != "" {
		t.Fatalf("Get of an unset key = %q, %v; want \"\", nil", got, err)
	}
	if _, err := rt.Get(ctx, "guestinfo.fail"); err == nil || !strings.Contains(err.Error(), "Failed sending message") {
		t.Fatalf("Get of a failing key = %v, want an error with the tool's output", err)
	}
	if _, err := (bootstrap.RPCTool{Path: filepath.Join(t.TempDir(), "absent")}).Get(ctx, v1.GuestinfoKey); err == nil {
		t.Fatal("Get with a missing tool succeeded")
	}

	// Through Guestinfo, the value is the bootstrap document and an unset
	// key means absent.
	data, err := bootstrap.Guestinfo{Reader: rt}.Read(ctx)
	if err != nil || string(data) != enc {
		t.Fatalf("Guestinfo.Read = %q, %v", data, err)
	}
	if err := os.Remove(filepath.Join(store, v1.GuestinfoKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := (bootstrap.Guestinfo{Reader: rt}).Read(ctx); !errors.Is(err, bootstrap.ErrAbsent) {
		t.Fatalf("Guestinfo.Read of an unset key = %v, want ErrAbsent", err)
	}
}

func TestRPCToolSet(t *testing.T) {
	ctx := context.Background()
	rt, store := fakeRPCTool(t)
	if err := rt.Set(ctx, "guestinfo.x", "a b=c"); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(store, "guestinfo.x"))
	if err != nil || string(raw) != "a b=c" {
		t.Fatalf("stored %q, %v; want the value with its space", raw, err)
	}
	if got, err := rt.Get(ctx, "guestinfo.x"); err != nil || got != "a b=c" {
		t.Fatalf("Get after Set = %q, %v", got, err)
	}
	// A key in a directory that does not exist makes the stand-in fail,
	// as the real tool fails for a key the VM may not set.
	if err := rt.Set(ctx, "no/such/key", "v"); err == nil {
		t.Fatal("Set succeeded although the tool failed")
	}
}

func TestGuestinfoClearTokenViaRPCTool(t *testing.T) {
	ctx := context.Background()
	rt, store := fakeRPCTool(t)
	doc := testDoc(t, "node-1")
	if err := os.WriteFile(filepath.Join(store, v1.GuestinfoKey), []byte(docBase64(t, doc)), 0o600); err != nil {
		t.Fatal(err)
	}

	found, err := bootstrap.Load(ctx, discard, []bootstrap.Source{bootstrap.Guestinfo{Reader: rt}})
	if err != nil {
		t.Fatal(err)
	}
	if found.Doc.Token != testToken {
		t.Fatalf("loaded token %q", found.Doc.Token)
	}
	if err := found.Source.ClearToken(ctx, found.Doc); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(store, v1.GuestinfoKey))
	if err != nil {
		t.Fatal(err)
	}
	checkClearedGuestinfo(t, string(raw), doc)

	// After a restart the agent finds the token-less document.
	again, err := bootstrap.Load(ctx, discard, []bootstrap.Source{bootstrap.Guestinfo{Reader: rt}})
	if err != nil || again.Doc.Token != "" || again.Doc.NodeName != "node-1" {
		t.Fatalf("reload = %+v, %v", again, err)
	}
}
