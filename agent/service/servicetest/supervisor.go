package servicetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/harmonykaas/harmony/agent/service"
)

// Supervisor is the real process supervisor with its run and log
// directories under root, as on a node (root/run/harmony,
// root/var/log/harmony); cfg gives the rest (Wrap, StopGrace). It stops
// every unit when the test ends and, when the test failed, prints the
// last 3000 bytes of each named unit's log.
func Supervisor(t testing.TB, root string, cfg service.SupervisorConfig, logs ...string) *service.Supervisor {
	t.Helper()
	cfg.RunDir = filepath.Join(root, "run/harmony")
	cfg.LogDir = filepath.Join(root, "var/log/harmony")
	sup, err := service.NewSupervisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sup.StopAll(context.Background()); err != nil {
			t.Errorf("stop all: %v", err)
		}
		if !t.Failed() {
			return
		}
		for _, u := range logs {
			b, _ := os.ReadFile(filepath.Join(cfg.LogDir, u+".log"))
			t.Logf("%s log (tail):\n%s", u, b[max(0, len(b)-3000):])
		}
	})
	return sup
}
