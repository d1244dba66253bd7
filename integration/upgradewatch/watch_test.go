package upgradewatch

import (
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// A replacement is timed from the first read that shows it to the first
// that does not; one still showing when the watch stops (the last worker,
// whose removal ends the operation) ends at the stop.
func TestReplacementsAreTimedUntilGoneOrStopped(t *testing.T) {
	w := newWatch(func() {})
	t0 := time.Now().Add(-time.Minute)
	w.nodes([]v1.ClusterNode{{Name: "w1", Upgrade: v1.UpgradeReplacedBy + "w3"}, {Name: "w2"}, {Name: "w3", Upgrade: v1.UpgradeReplaces + "w1"}}, t0)
	w.nodes([]v1.ClusterNode{{Name: "w2", Upgrade: v1.UpgradeReplacedBy + "w4"}, {Name: "w3"}, {Name: "w4", Upgrade: v1.UpgradeReplaces + "w2"}}, t0.Add(20*time.Second))
	if got := w.res.Replaced["w1"]; got != 20*time.Second {
		t.Errorf("w1 replaced in %s, want 20s: from when it showed until it was gone", got)
	}
	if _, done := w.res.Replaced["w2"]; done {
		t.Error("w2 timed while its replacement still shows")
	}
	res := w.Stop()
	if got := res.Replaced["w2"]; got < 40*time.Second || got > 41*time.Second {
		t.Errorf("w2 replaced in %s, want about 40s: from when it showed until the stop", got)
	}
	if got := res.Replaced["w1"]; got != 20*time.Second {
		t.Errorf("the stop changed w1's time to %s", got)
	}
	// The surge workers show "Replaces" for as long as the workers they
	// replace: timing them too would list each replacement twice.
	for _, surge := range []string{"w3", "w4"} {
		if got, timed := res.Replaced[surge]; timed {
			t.Errorf("surge worker %s timed as a replacement (%s)", surge, got)
		}
	}
	if len(res.Replaced) != 2 {
		t.Errorf("replacements timed: %v, want only w1 and w2", res.Replaced)
	}
}

// A master's replacement is told step by step: how long the controller's
// view showed each step, the last until the replacement ended.
func TestTimelineSaysHowLongEachStepShowed(t *testing.T) {
	w := newWatch(func() {})
	t0 := time.Now()
	for i, step := range []string{v1.SwapHandingOver, v1.SwapHandingOver, v1.SwapHandedOver, v1.SwapVerifying, v1.SwapVerifying, v1.SwapVerifying, ""} {
		w.nodes([]v1.ClusterNode{{Name: "m1", Upgrade: step}, {Name: "m2"}}, t0.Add(time.Duration(i)*2*time.Second))
	}
	res := w.Stop()
	want := v1.SwapHandingOver + " 4s, " + v1.SwapHandedOver + " 2s, " + v1.SwapVerifying + " 6s"
	if got := res.Timeline("m1"); got != want {
		t.Errorf("m1's timeline %q, want %q", got, want)
	}
	if got := res.Timeline("m2"); got != "" {
		t.Errorf("m2, never replaced, has the timeline %q", got)
	}
}
