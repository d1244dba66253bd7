package cluster

import (
	"testing"
	"time"

	"github.com/harmonykaas/harmony/controller/store"
)

// A report that changes a node's phase ends its machine's wait for it
// (NodePhaseChanged), but neither a failed step's backoff nor the next
// look of a machine that waits on nothing.
func TestNodePhaseChangedEndsWaitsNotBackoffs(t *testing.T) {
	e := newPassEnv(t, 1, 3, 1)
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	ms := e.all()
	var leaving, failing, settled string
	for i := range ms {
		m := &ms[i]
		if m.Name == ms[0].Name {
			continue
		}
		switch {
		case leaving == "":
			leaving, m.Remove, m.NextTry = m.Name, true, later // waits for its Left
		case failing == "":
			failing, m.Remove, m.NextTry, m.Attempts, m.LastError = m.Name, true, later, 2, "power off: task failed"
		default:
			settled, m.NextTry = m.Name, later
		}
	}
	err := e.st.Update(func(tx *store.Tx) error {
		for i := range ms {
			if err := putMachine(tx, &ms[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{leaving, failing, settled, "not-a-node"} {
		if err := e.s.NodePhaseChanged(name); err != nil {
			t.Fatalf("NodePhaseChanged(%s): %v", name, err)
		}
	}
	for name, want := range map[string]time.Time{leaving: {}, failing: later, settled: later} {
		m, _ := e.machine(name)
		if !m.NextTry.Equal(want) {
			t.Errorf("%s: next try %v, want %v", name, m.NextTry, want)
		}
	}
}
