package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// StopHost stops every process of one host, as if its VM had been powered
// off: the agent and every daemon it runs. Its files stay.
func StopHost(ctx context.Context, stateDir, name string) error {
	_, h, err := findHost(stateDir, name)
	if err != nil {
		return err
	}
	killAll(ctx, netnsPIDs(ctx, h.Netns), 10*time.Second)
	if pids := netnsPIDs(ctx, h.Netns); len(pids) > 0 {
		return fmt.Errorf("lab: host %s: processes %v still run", name, pids)
	}
	return nil
}

// StartHost starts a stopped host's agent again, as a VM booting; the
// agent brings its daemons back.
func StartHost(ctx context.Context, stateDir, name string) error {
	r, h, err := findHost(stateDir, name)
	if err != nil {
		return err
	}
	if pids := netnsPIDs(ctx, h.Netns); len(pids) > 0 {
		return fmt.Errorf("lab: host %s is running (processes %v)", name, pids)
	}
	return startAgent(r, h)
}

func findHost(stateDir, name string) (*record, hostRecord, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, hostRecord{}, err
	}
	r, err := loadRecord(abs)
	if err != nil {
		return nil, hostRecord{}, err
	}
	if r == nil {
		return nil, hostRecord{}, fmt.Errorf("lab: no lab in %s", abs)
	}
	for _, h := range r.Hosts {
		if h.Name == name {
			return r, h, nil
		}
	}
	return nil, hostRecord{}, fmt.Errorf("lab: no host %q in %s", name, abs)
}
