package vsphere

import (
	"strings"
	"testing"

	"github.com/vmware/govmomi/vim25/mo"
)

// SetGuestinfo writes guestinfo keys into a running VM, and refuses,
// writing nothing, a set that holds any other key: the rest of a VM's
// ExtraConfig is vCenter's and the hypervisor's.
func TestSetGuestinfoWritesOnlyGuestinfo(t *testing.T) {
	ctx, s, folder, template := newSwapFixture(t)
	ref, err := s.Clone(ctx, CloneSpec{Template: template, Name: "c-w1", Folder: folder, Datastore: "LocalDS_0"})
	if err != nil {
		t.Fatal(err)
	}
	extra := func() map[string]string {
		t.Helper()
		var vm mo.VirtualMachine
		if err := s.VM(ref).Properties(ctx, ref, []string{"config.extraConfig"}, &vm); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, o := range vm.Config.ExtraConfig {
			v := o.GetOptionValue()
			if s, ok := v.Value.(string); ok {
				out[v.Key] = s
			}
		}
		return out
	}
	if err := s.SetGuestinfo(ctx, ref, map[string]string{"guestinfo.harmony.bootstrap": "first"}); err != nil {
		t.Fatal(err)
	}
	if got := extra()["guestinfo.harmony.bootstrap"]; got != "first" {
		t.Fatalf("guestinfo.harmony.bootstrap = %q, want first", got)
	}
	err = s.SetGuestinfo(ctx, ref, map[string]string{"guestinfo.harmony.bootstrap": "second", "isolation.tools.copy.disable": "FALSE"})
	if err == nil || !strings.Contains(err.Error(), `"isolation.tools.copy.disable" is not a guestinfo key`) {
		t.Fatalf("a set with a key outside guestinfo: %v, want it refused by name", err)
	}
	after := extra()
	if after["guestinfo.harmony.bootstrap"] != "first" {
		t.Errorf("the refused set changed guestinfo.harmony.bootstrap to %q", after["guestinfo.harmony.bootstrap"])
	}
	if _, ok := after["isolation.tools.copy.disable"]; ok {
		t.Error("the refused set wrote isolation.tools.copy.disable")
	}
}
