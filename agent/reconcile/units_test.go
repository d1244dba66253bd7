package reconcile

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
)

func TestRunUnitReloadsOnlyWhatIsOwed(t *testing.T) {
	rec := servicetest.New()
	h := &Host{Root: t.TempDir(), Services: rec}
	ctx := context.Background()
	u := service.Unit{Name: "web", Command: []string{"/bin/web"}}
	check := func(filesChanged bool, want ...string) {
		t.Helper()
		got, err := h.RunUnit(ctx, u, filesChanged)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("RunUnit(changed=%v) = %v, %v; want %v", filesChanged, got, err, want)
		}
	}
	check(true, "started web") // a fresh start reads the files: nothing owed
	if h.ReloadMarker("web").Pending() {
		t.Fatal("a reload is owed after a fresh start")
	}
	check(false)
	check(true, "reloaded web")
	check(false)

	// A reload that fails stays owed, and the next pass does it.
	rec.FailNextReload(errors.New("no such process"))
	if _, err := h.RunUnit(ctx, u, true); err == nil {
		t.Fatal("a failed reload was not reported")
	}
	check(false, "reloaded web")

	if got, err := h.StopUnit(ctx, "web"); err != nil || !slices.Equal(got, []string{"stopped web"}) {
		t.Fatalf("StopUnit = %v, %v", got, err)
	}
	if got, err := h.StopUnit(ctx, "web"); err != nil || len(got) != 0 {
		t.Fatalf("StopUnit of a unit that is not there = %v, %v", got, err)
	}
}
