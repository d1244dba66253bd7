package body

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// A body gets a cgroup of its own in every hierarchy, as a VM has its own
// kernel's: without one, every body's kubelet would manage the same
// kubepods cgroups at the root of the machine's hierarchies, and each
// would remove the others' pods as orphans. nspawn runs the body in a
// cgroup namespace, so the body sees its cgroup as the root. The machine
// has no systemd to make one (nspawn's --slice needs it), so the body's
// process joins them itself before it becomes nspawn (startArgs).

// cgroupMount is one cgroup hierarchy of the machine.
type cgroupMount struct {
	// Dir is where the hierarchy is mounted; Own is this process's cgroup
	// in it, relative to the mount's root.
	Dir, Own string
	// Cpuset: a new cpuset cgroup takes no task until its cpus and mems
	// are set.
	Cpuset bool
}

// cgroupMounts reads the machine's cgroup hierarchies (v1 controllers,
// and v2 when mounted) and this process's cgroup in each.
func cgroupMounts() ([]cgroupMount, error) {
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	mounts, err := Mounts()
	if err != nil {
		return nil, err
	}
	var out []cgroupMount
	seen := map[string]bool{}
	for _, m := range mounts {
		if (m.FSType != "cgroup" && m.FSType != "cgroup2") || m.Root != "/" || seen[m.Point] {
			continue
		}
		key := "" // v2
		if m.FSType == "cgroup" {
			key = v1Hierarchy(m.SuperOptions)
			if key == "" {
				continue
			}
		}
		path, ok := own[key]
		if !ok {
			continue
		}
		seen[m.Point] = true
		out = append(out, cgroupMount{Dir: m.Point, Own: path, Cpuset: m.FSType == "cgroup" && slices.Contains(strings.Split(key, ","), "cpuset")})
	}
	return out, nil
}

// v1Hierarchy names a v1 hierarchy from its super options as
// /proc/self/cgroup does: "cpu,cpuacct" or "name=systemd".
func v1Hierarchy(superOptions string) string {
	var names []string
	for _, o := range strings.Split(superOptions, ",") {
		switch {
		case o == "rw" || o == "ro" || strings.HasPrefix(o, "release_agent=") || o == "xattr" || o == "noprefix" || o == "clone_children" || o == "cpuset_v2_mode":
		default:
			names = append(names, o)
		}
	}
	return strings.Join(names, ",")
}

// ownCgroups is /proc/self/cgroup by hierarchy ("" for v2).
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out, sc.Err()
}

// cgroupName is a body's cgroup, below this process's own: named for its
// state directory, so that two labs' bodies of one name differ, and so
// that a cleanup with only the directory finds it.
func cgroupName(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return "harmony-body-" + hex.EncodeToString(sum[:8])
}

// cgroupDirs are the body's cgroups, one per hierarchy.
func cgroupDirs(stateDir string) ([]cgroupMount, []string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, nil, fmt.Errorf("cgroups: %w", err)
	}
	var dirs []string
	for _, m := range mounts {
		dirs = append(dirs, filepath.Join(m.Dir, m.Own, cgroupName(stateDir)))
	}
	return mounts, dirs, nil
}

// makeCgroups makes the body's cgroup in every hierarchy and returns
// them; the body's first process joins each (cgroup.procs).
func makeCgroups(stateDir string) ([]string, error) {
	mounts, dirs, err := cgroupDirs(stateDir)
	if err != nil {
		return nil, err
	}
	for i, m := range mounts {
		dir := dirs[i]
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup %s: %w", dir, err)
		}
		if !m.Cpuset {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
			}
			if err != nil {
				return nil, fmt.Errorf("cgroup %s: %w", dir, err)
			}
		}
	}
	return dirs, nil
}

// removeCgroups removes a body's cgroups, with every cgroup the body
// made below them, deepest first. A cgroup that still holds a process
// stays, and is an error.
func removeCgroups(tops []string) error {
	var errs []error
	for _, top := range tops {
		if !isBodyCgroup(top) {
			errs = append(errs, fmt.Errorf("cgroup %q: not a body's; left alone", top))
			continue
		}
		var dirs []string
		err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Deepest first: a cgroup goes only once it has no children.
		slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// isBodyCgroup guards the removals and kills against a path that is not
// a body's cgroup.
func isBodyCgroup(dir string) bool {
	return strings.HasPrefix(filepath.Base(dir), "harmony-body-") && strings.HasPrefix(dir, "/sys/fs/cgroup/")
}

// killCgroups sends SIGKILL to every process in a body's cgroups.
func killCgroups(tops []string) {
	for _, top := range tops {
		if !isBodyCgroup(top) {
			continue
		}
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
}

// joinScript makes the shell that starts nspawn join the body's cgroups
// first: sh -c joinScript sh PROCS... -- NSPAWN ARGS...
const joinScript = `while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"`

// Memory is the body's memory as its memory cgroup counts it: everything
// charged to it (page cache included), and the anonymous memory of its
// processes (total_rss), which is what a VM of that size must hold.
func (b *Body) Memory() (usage, rss uint64, err error) {
	for _, dir := range b.cgroups {
		if !strings.Contains(dir, "/memory/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
		if err != nil {
			return 0, 0, err
		}
		if usage, err = strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", dir, err)
		}
		stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if err != nil {
			return 0, 0, err
		}
		for _, line := range strings.Split(string(stat), "\n") {
			if v, ok := strings.CutPrefix(line, "total_rss "); ok {
				rss, err = strconv.ParseUint(v, 10, 64)
				return usage, rss, err
			}
		}
		return usage, 0, fmt.Errorf("%s: memory.stat has no total_rss", dir)
	}
	return 0, 0, fmt.Errorf("body %s: no memory cgroup", b.Name)
}
