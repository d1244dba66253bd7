package agent

import (
	"testing"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// While the role says Leave the node reports Leaving with each step's
// progress, then Left once every step has left; the report validates.
func TestReportWhileLeaving(t *testing.T) {
	for _, tc := range []struct {
		phases []string
		want   string
	}{
		{[]string{reconcile.PhaseLeft, reconcile.PhaseFailed, reconcile.PhaseLeaving}, v1.PhaseLeaving},
		{[]string{reconcile.PhaseLeft, reconcile.PhaseLeft}, v1.PhaseLeft},
	} {
		ns := &nodeStack{leaving: true}
		for i, p := range tc.phases {
			ns.statuses = append(ns.statuses, reconcile.Status{Component: []string{"drain", "keepalived", "etcd"}[i], Phase: p, Healthy: p == reconcile.PhaseLeft})
		}
		st := v1.Status{APIVersion: v1.APIVersion, Kind: "Status", Phase: v1.PhaseEnrolled}
		ns.report(&st)
		if st.Phase != tc.want || len(st.Components) != len(tc.phases) || st.Components[0].Phase != reconcile.PhaseLeft {
			t.Errorf("phases %q: reported %+v", tc.phases, st)
		}
		if err := st.Validate(); err != nil {
			t.Errorf("the report does not validate: %v", err)
		}
	}
}
