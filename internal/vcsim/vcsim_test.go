package vcsim

import (
	"maps"
	"strings"
	"testing"
)

// The simulator process takes its method delays on the command line, as
// the tests that run it format them.
func TestMethodDelayRoundTrips(t *testing.T) {
	want := map[string]int{"CloneVM_Task": 300, "Destroy_Task": 0, "PowerOnVM_Task": 1500}
	got, err := ParseMethodDelay(FormatMethodDelay(want))
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("round trip: %v, %v; want %v", got, err, want)
	}
	if got, err := ParseMethodDelay(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v, %v; want none", got, err)
	}
	for _, bad := range []string{"CloneVM_Task", "CloneVM_Task=", "=300", "CloneVM_Task=-1", "CloneVM_Task=3s", "CloneVM_Task=1,"} {
		if _, err := ParseMethodDelay(bad); err == nil || !strings.Contains(err.Error(), "Method=milliseconds") {
			t.Errorf("%q: %v, want an error saying the form", bad, err)
		}
	}
}
