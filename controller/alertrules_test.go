package controller

import (
	"testing"

	htest "github.com/harmonykaas/harmony/internal/testutil"
)

// Every controller metric the alerting rules name is one the controller
// exports: a renamed metric fails here, not silently in an operator's
// Prometheus.
func TestAlertRulesNameTheControllersMetrics(t *testing.T) {
	tc := startController(t, t.TempDir())
	htest.CheckRuleMetrics(t, "harmony_controller_", tc.c.metrics.registry)
}
