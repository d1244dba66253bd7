package vsphere

import (
	"testing"
)

// A step retried after a crash may meet a VM it already destroyed: Destroy
// takes that as done, and PowerOff's fault is IsNotFound through the
// error's wrapping, which the engine relies on.
func TestDestroyAndPowerOffOfAGoneVM(t *testing.T) {
	ctx, s, folder, template := newSwapFixture(t)
	ref, err := s.Clone(ctx, CloneSpec{Template: template, Name: "c-m1", Folder: folder, Datastore: "LocalDS_0"})
	if err != nil {
		t.Fatal(err)
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
}
