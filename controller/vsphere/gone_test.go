package vsphere

import (
	"testing"
)

// A step retried after a crash may meet a VM it already destroyed: Destroy
// takes that as done, and the fault of each step on a VM that is gone is
// IsNotFound through the error's wrapping, which the engine relies on.
// Gone tells a VM destroyed or unregistered from one that exists.
func TestDestroyAndPowerOffOfAGoneVM(t *testing.T) {
	ctx, s, folder, template := newSwapFixture(t)
	ref, err := s.Clone(ctx, CloneSpec{Template: template, Name: "c-m1", Folder: folder, Datastore: "LocalDS_0"})
	if err != nil {
		t.Fatal(err)
	}
	if gone, err := s.Gone(ctx, ref); err != nil || gone {
		t.Fatalf("Gone of a VM that exists: %v, %v", gone, err)
	}
	if err := s.Destroy(ctx, ref); err != nil {
		t.Fatalf("first destroy: %v", err)
	}
	if err := s.Destroy(ctx, ref); err != nil {
		t.Errorf("Destroy of a VM already gone: %v, want nil", err)
	}
	if err := s.PowerOff(ctx, ref); err == nil || !IsNotFound(err) {
		t.Errorf("PowerOff of a gone VM: %v, want a not-found fault", err)
	}
	if gone, err := s.Gone(ctx, ref); err != nil || !gone {
		t.Errorf("Gone of a destroyed VM: %v, %v", gone, err)
	}

	// Unregistered (removed from the inventory): its files stay, the VM
	// is gone all the same.
	ref, err = s.Clone(ctx, CloneSpec{Template: template, Name: "c-m2", Folder: folder, Datastore: "LocalDS_0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.VM(ref).Unregister(ctx); err != nil {
		t.Fatal(err)
	}
	if gone, err := s.Gone(ctx, ref); err != nil || !gone {
		t.Errorf("Gone of an unregistered VM: %v, %v", gone, err)
	}
	steps := map[string]error{"Rename": s.Rename(ctx, ref, "c-m2-old"), "PowerOn": s.PowerOn(ctx, ref)}
	_, steps["DetachPersistentDisks"] = s.DetachPersistentDisks(ctx, ref)
	_, steps["PowerState"] = s.VM(ref).PowerState(ctx)
	for step, err := range steps {
		if !IsNotFound(err) {
			t.Errorf("%s of an unregistered VM: %v, want a not-found fault", step, err)
		}
	}
}
