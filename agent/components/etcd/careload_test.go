package etcd

import (
	"slices"
	"testing"
)

// A new etcd CA must restart etcd (it reads its trusted CA only at start;
// TestCertificateChanges). ensureCerts writes the CA file long before
// RunUnit, after the data directory checks and membership. An agent
// killed in between (or a pass that fails in between) once left the new
// CA on disk and no restart owed: etcd kept trusting the old CA while its
// own certificates were re-issued from the new one. The restart is now
// owed before the CA file changes.
func TestCARestartOwedWhenThePassDiesAfterTheCAWrite(t *testing.T) {
	f := newFixture(t)
	f.pass(t, f.role(t))
	f.fakeState(t) // the member has run and has state
	f.pass(t, f.role(t))
	f.rec.TakeCalls()

	f.ca = newCA(t, "rotated-etcd-ca")
	role := f.role(t)
	// The pass acting on the rotated CA gets through ensureCerts (the
	// same call) and is killed.
	s, err := settingsFrom(role)
	if err != nil {
		t.Fatal(err)
	}
	actions, err := ensureCerts(f.host, s)
	if caChanged := slices.Contains(actions, "wrote "+PKIDir+"/"+caFile); err != nil || !caChanged {
		t.Fatalf("ensureCerts: %v %q %v", caChanged, actions, err)
	}

	// A new agent process converges on the same role.
	f.comp = New(Config{DialContext: noNetwork})
	st := f.pass(t, role)
	calls := f.rec.TakeCalls()
	t.Logf("after restart: phase=%s actions=%q calls=%q", st.Phase, st.Actions, calls)
	if !slices.Contains(calls, "reload etcd") && !slices.Contains(calls, "restart etcd") && !slices.Contains(calls, "ensure etcd") {
		t.Errorf("etcd was never restarted to trust the rotated CA: calls %q", calls)
	}
}
