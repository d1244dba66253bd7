package node

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestUnitsFor checks the units each image installs and enables: both
// carry the agent and harmony-network.service (the static address from
// guestinfo, before systemd-networkd), and every unit named exists in the
// repository's systemd/ directory, which the build reads them from.
func TestUnitsFor(t *testing.T) {
	repoUnits := filepath.Join("..", "..", "..", "systemd")
	for role, want := range map[string][]string{
		RoleNode:         {"harmony-agent.service", "harmony-network.service", "harmony-data-disk.service", "kubelet.service", "harmony-images-import.service"},
		RoleControlPlane: {"harmony-agent.service", "harmony-network.service", "harmony-data-disk.service", "harmony-controller.service"},
	} {
		got := unitsFor(role)
		if !slices.Equal(got, want) {
			t.Errorf("%s: units %v, want %v", role, got, want)
		}
		for _, u := range got {
			data, err := os.ReadFile(filepath.Join(repoUnits, u))
			if err != nil {
				t.Errorf("%s: %v", role, err)
				continue
			}
			// systemctl enable needs an [Install] section.
			if !strings.Contains(string(data), "\n[Install]\nWantedBy=") {
				t.Errorf("%s: %s has no [Install] WantedBy=", role, u)
			}
		}
	}

	// harmony-network.service must run before networkd reads its files.
	data, err := os.ReadFile(filepath.Join(repoUnits, "harmony-network.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"DefaultDependencies=no",
		"Before=systemd-networkd.service network-pre.target",
		"Wants=network-pre.target",
		"ExecStart=/usr/local/bin/harmony-agent network apply",
		"TimeoutStartSec=",
	} {
		if !strings.Contains(string(data), "\n"+line) {
			t.Errorf("harmony-network.service lacks %q", line)
		}
	}
}
