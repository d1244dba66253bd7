package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/vmware/vmw-guestinfo/rpcvmx"
	"github.com/vmware/vmw-guestinfo/vmcheck"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// GuestinfoReader reads and writes VMware guestinfo keys.
type GuestinfoReader interface {
	Get(ctx context.Context, key string) (string, error)
	Set(ctx context.Context, key, value string) error
}

// Guestinfo reads the document from guestinfo.harmony.bootstrap, where the
// controller writes it into the VM it clones.
type Guestinfo struct{ Reader GuestinfoReader }

func (g Guestinfo) Name() string { return "guestinfo " + v1.GuestinfoKey }

func (g Guestinfo) Read(ctx context.Context) ([]byte, error) {
	if g.Reader == nil {
		return nil, ErrAbsent
	}
	v, err := g.Reader.Get(ctx, v1.GuestinfoKey)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(v) == "" {
		return nil, ErrAbsent
	}
	return []byte(v), nil
}

// ClearToken writes the document back without its token. A guest may set
// its own guestinfo keys.
func (g Guestinfo) ClearToken(ctx context.Context, b *v1.Bootstrap) error {
	clean := *b
	clean.Token = ""
	enc, err := clean.EncodeGuestinfo()
	if err != nil {
		return err
	}
	return g.Reader.Set(ctx, v1.GuestinfoKey, enc)
}

// DetectGuestinfo returns the backdoor reader when running on VMware, else
// the vmware-rpctool reader when open-vm-tools is installed, else nil.
func DetectGuestinfo() (GuestinfoReader, string) {
	// IsVirtualWorld checks the CPUID hypervisor vendor before it touches
	// the backdoor port, so it is safe on any x86 machine.
	if ok, err := vmcheck.IsVirtualWorld(true); err == nil && ok {
		return backdoor{}, "VMware backdoor"
	}
	if path, err := exec.LookPath("vmware-rpctool"); err == nil {
		return RPCTool{Path: path}, "vmware-rpctool"
	}
	return nil, "none (not on VMware and no vmware-rpctool)"
}

// backdoor talks to the hypervisor directly through the VMware backdoor
// I/O port. It cannot run outside VMware, so no test here exercises it.
type backdoor struct{}

func (backdoor) Get(_ context.Context, key string) (string, error) {
	v, err := rpcvmx.NewConfig().String(key, "")
	if err != nil {
		return "", fmt.Errorf("guestinfo %s via backdoor: %w", key, err)
	}
	return v, nil
}

func (backdoor) Set(_ context.Context, key, value string) error {
	if err := rpcvmx.NewConfig().SetString(key, value); err != nil {
		return fmt.Errorf("set guestinfo %s via backdoor: %w", key, err)
	}
	return nil
}

// RPCTool runs open-vm-tools' vmware-rpctool.
type RPCTool struct{ Path string }

func (t RPCTool) Get(ctx context.Context, key string) (string, error) {
	out, err := t.run(ctx, "info-get "+key)
	if err != nil {
		// rpctool exits 1 with "No value found" for an unset key.
		if bytes.Contains(out, []byte("No value found")) {
			return "", nil
		}
		return "", fmt.Errorf("vmware-rpctool info-get %s: %w: %s", key, err, bytes.TrimSpace(out))
	}
	return strings.TrimRight(string(out), "\n"), nil
}

func (t RPCTool) Set(ctx context.Context, key, value string) error {
	if out, err := t.run(ctx, "info-set "+key+" "+value); err != nil {
		return fmt.Errorf("vmware-rpctool info-set %s: %w: %s", key, err, bytes.TrimSpace(out))
	}
	return nil
}

func (t RPCTool) run(ctx context.Context, command string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, t.Path, command)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return out.Bytes(), err
	}
	return out.Bytes(), err
}
