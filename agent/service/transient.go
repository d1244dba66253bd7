package service

import (
	"fmt"
	"time"
)

// TransientCommand wraps argv so that it runs as a transient unit of the
// host's systemd, waited for, its output piped back: systemd-run --wait
// --pipe. The command then runs with systemd's full privileges in the
// host's own mount namespace, outside the agent's sandbox (its private
// mount namespace and bounded capabilities). The unit is bounded by
// maxRuntime even if the caller is killed meanwhile, and collected when
// it ends, failed or not, so the name is free for the next run.
func TransientCommand(name string, maxRuntime time.Duration, argv []string) []string {
	out := []string{"systemd-run", "--wait", "--pipe", "--quiet", "--collect",
		"--service-type=exec",
		"--unit=" + UnitName(name),
		fmt.Sprintf("--property=RuntimeMaxSec=%d", int(maxRuntime.Round(time.Second)/time.Second)),
		"--"}
	return append(out, argv...)
}
