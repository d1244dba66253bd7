package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/ova/ovf"
)

// builtImages are the OVAs `make images` wrote, by role.
func builtImages(t *testing.T) map[string]string {
	t.Helper()
	nodeImage(t) // skips without HARMONY_IMAGES
	dir := os.Getenv("HARMONY_IMAGES")
	out := map[string]string{}
	for _, role := range []string{"node", "control-plane"} {
		found, _ := filepath.Glob(filepath.Join(dir, "harmony-"+role+"-*.ova"))
		if len(found) == 0 {
			t.Fatalf("no harmony-%s-*.ova in %s", role, dir)
		}
		out[role] = found[len(found)-1]
	}
	return out
}

// TestBuiltImagesValidate runs `harmonyctl ova validate` and `inspect` on
// the OVAs `make images` built and checks what each role must carry.
func TestBuiltImagesValidate(t *testing.T) {
	images := builtImages(t)
	harmonyctl := filepath.Join(binaries(t), "harmonyctl")
	for role, path := range images {
		t.Run(role, func(t *testing.T) {
			out, err := exec.Command(harmonyctl, "ova", "validate", path).CombinedOutput()
			if err != nil || !strings.Contains(string(out), ": ok: ") {
				t.Fatalf("ova validate %s: %v\n%s", path, err, out)
			}
			out, err = exec.Command(harmonyctl, "ova", "inspect", "-o", "json", path).Output()
			if err != nil {
				t.Fatalf("ova inspect: %v", err)
			}
			var s struct {
				Descriptor *ovf.Descriptor   `json:"descriptor"`
				Versions   map[string]string `json:"componentVersions"`
			}
			if err := json.Unmarshal(out, &s); err != nil {
				t.Fatal(err)
			}
			props := map[string]ovf.Property{}
			for _, p := range s.Descriptor.Properties {
				props[p.Key] = p
			}
			if props["harmony.image.role"].Default != role {
				t.Errorf("harmony.image.role %q, want %q", props["harmony.image.role"].Default, role)
			}
			for _, c := range []string{"harmony-agent", "kubernetes", "etcd-server", "keepalived", "haproxy"} {
				if s.Versions[c] == "" {
					t.Errorf("no version recorded for %s: %v", c, s.Versions)
				}
			}
			switch role {
			case "node":
				for _, c := range []string{"kubernetes-previous", "containerd", "runc", "containernetworking-plugins", "coredns", "pause"} {
					if s.Versions[c] == "" {
						t.Errorf("the node image records no %s version", c)
					}
				}
				if len(s.Descriptor.Disks) != 1 {
					t.Errorf("node OVA disks: %+v", s.Descriptor.Disks)
				}
				if st, _ := os.Stat(path); st.Size() >= 500e6 {
					t.Logf("note: the node OVA is %d bytes, above the 500 MB target", st.Size())
				}
			case "control-plane":
				if s.Versions["harmony-controller"] == "" {
					t.Error("the appliance records no controller version")
				}
				if len(s.Descriptor.Disks) != 2 || s.Descriptor.Disks[1].PopulatedSize != 0 {
					t.Errorf("appliance disks %+v: want the system disk and an empty data disk", s.Descriptor.Disks)
				}
				for _, key := range []string{"harmony.hostname", "harmony.ip", "harmony.gateway", "harmony.dns",
					"harmony.ntp", "harmony.controller_vip", "harmony.admin_password_hash"} {
					if !props[key].UserConfigurable {
						t.Errorf("%s: want a user-configurable property", key)
					}
				}
			}
		})
	}
}
