package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/harmonykaas/harmony/ova"
	"github.com/harmonykaas/harmony/ova/ovf"
)

// testOVA assembles a small OVA like the node image's: one system disk
// and fixed version properties.
func testOVA(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "system.raw")
	data := make([]byte, 8<<20)
	copy(data[1<<20:], bytes.Repeat([]byte("harmony "), 8192))
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "harmony-node.ova")
	_, err := ova.Assemble(context.Background(), ova.Options{
		Output: out,
		Descriptor: ovf.Descriptor{
			Name: "harmony-node", CPUs: 2, MemoryMiB: 4096, OSType: "debian12_64Guest", Network: "nic0",
			Properties: []ovf.Property{
				{Key: "harmony.hostname", Type: ovf.TypeString, UserConfigurable: true, Label: "Hostname"},
				{Key: "harmony.version.kubernetes", Type: ovf.TypeString, Label: "kubernetes version", Default: "v1.34.2"},
				{Key: "harmony.version.etcd-server", Type: ovf.TypeString, Label: "etcd version", Default: "3.4.23-4+b4"},
			},
		},
		Disks:   []ova.SourceDisk{{ID: "system", RawPath: raw}},
		ModTime: time.Unix(1700000000, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func run(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// rewrite copies an OVA's entries in the given order (nil: as they are),
// passing each through edit.
func rewrite(t *testing.T, src string, order []int, edit func(i int, data []byte) []byte) string {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var headers []*tar.Header
	var bodies [][]byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		headers, bodies = append(headers, h), append(bodies, edit(len(bodies), data))
	}
	if order == nil {
		for i := range headers {
			order = append(order, i)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, i := range order {
		headers[i].Size = int64(len(bodies[i]))
		if err := tw.WriteHeader(headers[i]); err != nil {
			t.Fatal(err)
		}
		tw.Write(bodies[i])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "edited.ova")
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestOVAValidate(t *testing.T) {
	good := testOVA(t)
	out, err := run(t, ovaValidateCommand(), good)
	if err != nil || !strings.Contains(out, ": ok: 3 files, SHA256 manifest") {
		t.Fatalf("a good OVA: %v\n%s", err, out)
	}

	same := func(_ int, data []byte) []byte { return data }
	for name, tc := range map[string]struct {
		order []int
		edit  func(i int, data []byte) []byte
		want  string
	}{
		"corrupted disk byte": {nil, func(i int, data []byte) []byte {
			if i == 2 {
				data[len(data)/2] ^= 0x40
			}
			return data
		}, "harmony-node-disk1.vmdk: SHA256 digest mismatch"},
		"wrong manifest line": {nil, func(i int, data []byte) []byte {
			if i == 1 { // the descriptor's digest, one hex digit changed
				at := bytes.Index(data, []byte("SHA256(harmony-node.ovf)= ")) + len("SHA256(harmony-node.ovf)= ")
				if data[at] == '0' {
					data[at] = '1'
				} else {
					data[at] = '0'
				}
			}
			return data
		}, "harmony-node.ovf: SHA256 digest mismatch"},
		"wrong tar order":      {[]int{1, 0, 2}, same, "harmony-node.mf: manifest is entry 1, must be second"},
		"disk before manifest": {[]int{0, 2, 1}, same, "harmony-node-disk1.vmdk: disk is entry 2"},
		"bad disk header": {nil, func(i int, data []byte) []byte {
			if i == 2 {
				data[4] = 2 // the header's version field
			}
			return data
		}, "header version 2: want 3"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := rewrite(t, good, tc.order, tc.edit)
			out, err := run(t, ovaValidateCommand(), bad)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v (out %q), want one containing %q", err, out, tc.want)
			}
		})
	}
}

func TestOVAInspect(t *testing.T) {
	path := testOVA(t)
	out, err := run(t, ovaInspectCommand(), path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vmx-15, EFI firmware, 2 CPUs, 4096 MiB", "system", "8.0 MiB", "harmony.hostname", "user",
		"component versions:", "kubernetes", "v1.34.2", "etcd-server", "SHA256"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, ovaInspectCommand(), "-o", "json", path)
	if err != nil {
		t.Fatal(err)
	}
	var s ovaSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.Versions["kubernetes"] != "v1.34.2" || s.Versions["etcd-server"] != "3.4.23-4+b4" || len(s.Versions) != 2 {
		t.Fatalf("versions %v", s.Versions)
	}
	if _, err := run(t, ovaInspectCommand(), filepath.Join(t.TempDir(), "missing.ova")); err == nil {
		t.Fatal("inspect of a missing file succeeded")
	}
}
