package body

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/internal/procfs"
)

func TestV1Hierarchy(t *testing.T) {
	for opts, want := range map[string]string{
		"rw,memory":                         "memory",
		"rw,cpu,cpuacct":                    "cpu,cpuacct",
		"rw,xattr,name=systemd":             "name=systemd",
		"rw,release_agent=/x,freezer":       "freezer",
		"ro,noprefix,clone_children,cpuset": "cpuset",
	} {
		if got := v1Hierarchy(opts); got != want {
			t.Errorf("v1Hierarchy(%q) = %q, want %q", opts, got, want)
		}
	}
}

func TestParseMountinfoCgroup(t *testing.T) {
	m, err := procfs.ParseMountinfo(`35 27 0:30 /sub /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory`)
	if err != nil {
		t.Fatal(err)
	}
	if m.Root != "/sub" || m.FSType != "cgroup" || m.SuperOptions != "rw,memory" {
		t.Errorf("parsed %+v", m)
	}
}

// TestCgroups makes a body's cgroups on this machine, puts a process in
// them as the start shell does, and removes them with a child cgroup made
// below, as a body's kubelet would.
func TestCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups")
	}
	stateDir := t.TempDir()
	dirs, err := makeCgroups(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroups(dirs) })
	if len(dirs) == 0 {
		t.Fatal("no cgroup hierarchy found")
	}
	for _, d := range dirs {
		if filepath.Base(d) != cgroupName(stateDir) {
			t.Errorf("cgroup %s not named for the state dir", d)
		}
		if err := os.Mkdir(filepath.Join(d, "kubepods.slice"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeCgroups(dirs); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left: %v", d, err)
		}
	}
	// Only a body's cgroups are ever removed.
	if err := removeCgroups([]string{"/sys/fs/cgroup/memory"}); err == nil || !strings.Contains(err.Error(), "not a body's") {
		t.Errorf("removing the machine's memory hierarchy: %v", err)
	}
}

func TestGuestKernelScript(t *testing.T) {
	s := guestKernelScript()
	for name, value := range kubeletTunables {
		if !strings.Contains(s, " /proc/sys/"+name+"\n") {
			t.Errorf("the script does not bind %s:\n%s", name, s)
		}
		if value == "" {
			t.Errorf("%s has no value", name)
		}
	}
	if !strings.HasSuffix(s, "exec "+imageInit+"\n") {
		t.Errorf("the script does not end by becoming the image's init:\n%s", s)
	}
	for _, want := range []string{"/dev/kmsg", "remount,bind,rw"} {
		if !strings.Contains(s, want) {
			t.Errorf("the script lacks %q", want)
		}
	}
}

func TestWriteTunables(t *testing.T) {
	dir := t.TempDir()
	if err := writeTunables(dir); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, kernelDir, "vm.overcommit_memory"))
	if err != nil || string(got) != "1\n" {
		t.Errorf("vm.overcommit_memory file: %q, %v", got, err)
	}
}
