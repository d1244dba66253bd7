package keepalived

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// A leaving master stops keepalived (so the VIP moves at once); leaving
// again acts on nothing.
func TestLeaveStopsKeepalived(t *testing.T) {
	ns := netnsWithInterface(t, "198.18.0.11")
	f := newFixture(t, ns)
	ctx := context.Background()
	if st := f.comp.Reconcile(ctx, f.host, masterRole("m1")); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("converge: %+v", st)
	}
	f.rec.TakeCalls()
	leave := masterRole("m1")
	leave.Leave = &v1.LeaveSettings{Deadline: time.Now().Add(time.Minute)}
	st := f.comp.Leave(ctx, f.host, leave)
	if st.Phase != reconcile.PhaseLeft || !st.Healthy || !slices.Equal(st.Actions, []string{"stopped keepalived"}) ||
		!slices.Equal(f.rec.TakeCalls(), []string{"stop keepalived"}) {
		t.Fatalf("leave: %+v", st)
	}
	if st := f.comp.Leave(ctx, f.host, leave); st.Phase != reconcile.PhaseLeft || len(st.Actions) != 0 {
		t.Fatalf("second leave: %+v", st)
	}
}
