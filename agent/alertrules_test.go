package agent

import (
	"log/slog"
	"testing"

	"github.com/harmonykaas/harmony/agent/service/servicetest"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// Every agent metric the alerting rules name is one the agent with its
// whole node stack exports: a renamed metric fails here, not silently in
// an operator's Prometheus.
func TestAlertRulesNameTheAgentsMetrics(t *testing.T) {
	a, err := New(Config{StateDir: t.TempDir(), NodeStack: true, Root: t.TempDir(), Services: servicetest.New(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckRuleMetrics(t, "harmony_agent_", a.metrics.Registry)
}
