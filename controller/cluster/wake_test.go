package cluster

import (
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/store"
)

// A report with news for a node's waits ends its machine's wait for it
// (NodeReported): a new phase, or a new VM's first report whatever it
// says. A report without news does not, nor does any report end a failed
// step's backoff or the next look of a machine that waits on nothing.
func TestNodeReportedEndsWaitsNotBackoffs(t *testing.T) {
	e := newPassEnv(t, 1, 5, 1)
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	poweredOn := time.Now().Add(-time.Minute).UTC()
	ms := e.all()
	var leaving, quiet, fresh, failing, settled string
	for i := range ms {
		m := &ms[i]
		if m.Name == ms[0].Name {
			continue
		}
		switch {
		case leaving == "":
			leaving, m.Remove, m.NextTry = m.Name, true, later // waits for its Left
		case quiet == "":
			quiet, m.Remove, m.NextTry = m.Name, true, later // waits, and hears nothing new
		case fresh == "":
			// A replacement's new VM, waiting for its first report.
			fresh, m.NextTry, m.PoweredOnAt = m.Name, later, poweredOn
			m.Swap = &swap{Step: swapVerifying, PoweredOnAt: poweredOn}
		case failing == "":
			failing, m.Remove, m.NextTry, m.Attempts, m.LastError = m.Name, true, later, 2, "power off: task failed"
		default:
			settled, m.NextTry = m.Name, later
		}
	}
	e.put(ms)
	ready := v1.Status{Phase: v1.PhaseReady, ReportedAt: poweredOn.Add(-time.Hour), KubernetesNode: &v1.KubernetesNodeStatus{Ready: "True"}}
	leavingNow := v1.Status{Phase: v1.PhaseLeaving, ReportedAt: poweredOn.Add(-time.Hour)}
	reports := map[string][2]v1.Status{
		leaving: {leavingNow, at(v1.Status{Phase: v1.PhaseLeft}, poweredOn.Add(time.Second))},
		quiet:   {leavingNow, at(leavingNow, poweredOn.Add(time.Second))},
		// The old VM said Ready last, as the new one does now.
		fresh:        {ready, at(ready, poweredOn.Add(time.Second))},
		failing:      {leavingNow, at(v1.Status{Phase: v1.PhaseLeft}, poweredOn.Add(time.Second))},
		settled:      {ready, at(v1.Status{Phase: v1.PhaseConverging}, poweredOn.Add(time.Second))},
		"not-a-node": {{}, ready},
	}
	for name, r := range reports {
		if err := e.s.NodeReported(name, r[0], r[1]); err != nil {
			t.Fatalf("NodeReported(%s): %v", name, err)
		}
	}
	for name, want := range map[string]time.Time{leaving: {}, quiet: later, fresh: {}, failing: later, settled: later} {
		m, _ := e.machine(name)
		if !m.NextTry.Equal(want) {
			t.Errorf("%s: next try %v, want %v", name, m.NextTry, want)
		}
	}
}

// A report with news that comes while a machine's step runs, after the
// step read the node's report, finds no wait to end: the wait the step
// then records must not stand, or the machine would sleep through what it
// waits for until its next StatusPoll.
func TestNewsDuringAStepCancelsTheWaitItRecords(t *testing.T) {
	e := newPassEnv(t, 1, 1, 1)
	var m machine
	for _, c := range e.all() {
		if c.Role == v1.RoleWorker {
			m = c
		}
	}
	m.Remove = true
	e.put([]machine{m})
	// The pass reads the machine; its step reads the node's report
	// (Leaving) and will wait. Meanwhile the node reports Left.
	before := v1.Status{Phase: v1.PhaseLeaving, ReportedAt: time.Now().UTC()}
	if err := e.s.NodeReported(m.Name, before, at(v1.Status{Phase: v1.PhaseLeft}, before.ReportedAt.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	e.s.engine.recordWait(&m, time.Hour)
	if got, _ := e.machine(m.Name); !got.NextTry.IsZero() {
		t.Fatalf("the wait recorded after the news: next try %v, want none", got.NextTry)
	}
	// With no news since, a wait stands.
	e.s.engine.recordWait(&m, time.Hour)
	if got, _ := e.machine(m.Name); got.NextTry.Before(time.Now().Add(50 * time.Minute)) {
		t.Fatalf("a wait with no news since: next try %v, want an hour from now", got.NextTry)
	}
}

func at(st v1.Status, reportedAt time.Time) v1.Status {
	st.ReportedAt = reportedAt
	return st
}

func (e *passEnv) put(ms []machine) {
	e.t.Helper()
	err := e.st.Update(func(tx *store.Tx) error {
		for i := range ms {
			if err := putMachine(tx, &ms[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}
