package body

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// A VM has a kernel of its own; a body shares the machine's, and nspawn
// shows it less than a VM's guest sees. What runs in the node image (the
// kubelet above all) checks three things a body lacks, which the body's
// first process gives it before it becomes the image's systemd (bodyInit):
// done later, from outside, it raced systemd's start, which then left some
// controllers out of the slices it made (the kubelet's kubepods.slice
// missed the cpu controller on one body in three).
//
//   - /dev/kmsg, which the kubelet opens to watch for OOM kills: an empty
//     file stands in. The machine's own is not the body's to read
//     (dmesg_restrict), and the console, kind's stand-in, makes the
//     image's journald spin on it. So the kubelet in a body sees no OOM
//     kill, and its journal has no kernel messages;
//   - writable cgroup controllers: nspawn mounts them read-only, and the
//     kubelet makes its kubepods cgroups in them. They are the body's own
//     (cgroup.go), so the body writes nothing of the machine's;
//   - the kernel tunables the kubelet requires (kubeletTunables): /proc/sys
//     is read-only in a body, and these sysctls are the machine's, not a
//     namespace's. Each is a file of the body's with the value the kubelet
//     wants, bound over the sysctl in the body only.

// kubeletTunables are the sysctls the kubelet sets or, with
// protectKernelDefaults, requires (pkg/kubelet/cm's setupKernelTunables).
var kubeletTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// Where the tunables' files are, in the state directory and in the body.
const (
	kernelDir       = "kernel"
	kernelDirInBody = "/run/harmony-lab-kernel"
)

// writeTunables writes the tunables' files into the state directory, to
// be bound into the body at kernelDirInBody.
func writeTunables(stateDir string) error {
	dir := filepath.Join(stateDir, kernelDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, value := range kubeletTunables {
		if err := os.WriteFile(filepath.Join(dir, tunableFile(name)), []byte(value+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func tunableFile(name string) string { return strings.ReplaceAll(name, "/", ".") }

// imageInit is the image's systemd, which nspawn's --boot would run.
const imageInit = "/usr/lib/systemd/systemd"

// guestKernelScript is what the body's first process does in the body's
// mount namespace, with nspawn's capabilities, before it execs the
// image's init. A failure ends the body at once, its reason on the
// console.
func guestKernelScript() string {
	var b strings.Builder
	b.WriteString("set -e\n")
	b.WriteString("[ -e /dev/kmsg ] || { : > /dev/kmsg; chmod 0600 /dev/kmsg; }\n")
	// Each v1 controller nspawn mounted read-only; the mount point of
	// the unified hierarchy and name=systemd are writable already.
	b.WriteString("for d in /sys/fs/cgroup/*; do if mountpoint -q \"$d\"; then mount -o remount,bind,rw \"$d\"; fi; done\n")
	names := make([]string, 0, len(kubeletTunables))
	for name := range kubeletTunables {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "mount --bind %s/%s /proc/sys/%s\n", kernelDirInBody, tunableFile(name), name)
	}
	fmt.Fprintf(&b, "exec %s\n", imageInit)
	return b.String()
}

// bodyInit is the command nspawn runs as the body's PID 1 in place of
// --boot: the script, then the image's systemd.
func bodyInit() []string { return []string{"/bin/sh", "-c", guestKernelScript()} }
