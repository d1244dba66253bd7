package imageboot

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
)

// systemd prints "Started …" on the console only while the boot's own
// jobs run; harmony-agent (Type=notify) becomes active after that, once
// it has enrolled and made its first pass. So two tiny units report on
// the serial console. The first is ordered after the agent alone (the
// boot benchmark's clock stops at its line): the agent's state, then when
// systemd's generators and its loading of the units, and each unit on the
// agent's way, started and finished (or became active), in seconds
// since the kernel started, for finding where a boot's time goes
// (systemd-analyze critical-chain refuses to answer before the boot has
// finished). The second is ordered after the first-boot import of the
// container images too: the data disk, containerd's state, the images
// containerd holds for the kubelet, the kubelet's own version, and its
// unit: before kubeadm has run, the kubelet starts, finds no
// /var/lib/kubelet/config.yaml and is restarted until kubeadm writes one
// (the unit's state is activating or, between restarts, active). Tests
// add them to their copy of the disk; images never carry them.
const agentReportUnit = `[Unit]
Description=Report harmony-agent's state on the serial console (image boot test)
Wants=` + AgentUnit + `
After=` + AgentUnit + `

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo "harmony-boot-report: harmony-agent is $(systemctl is-active ` + AgentUnit + `)" > /dev/ttyS0'
# Each line opens the console anew: agetty, starting on ttyS0 about now,
# hangs up every descriptor open on it (vhangup), and writes to one opened
# before are lost.
# systemd's own stages first: its generators and its loading of the
# units (a daemon-reload since the boot would move them).
ExecStart=/bin/sh -c 'for s in Generators UnitsLoad; do echo "harmony-boot-report: unit systemd:$$s $(systemctl show -P $${s}StartTimestampMonotonic) $(systemctl show -P $${s}FinishTimestampMonotonic)" > /dev/ttyS0; done'
ExecStart=/bin/sh -c 'for u in ` + chainUnits + `; do echo "harmony-boot-report: unit $$u $(systemctl show -P InactiveExitTimestampMonotonic $$u) $(systemctl show -P ActiveEnterTimestampMonotonic $$u)" > /dev/ttyS0; done'
# The journal on the disk, for a benchmark that keeps it. Last: sync
# waits for every dirty page, the image import's hundreds of MB among
# them, which under TCG can take minutes.
ExecStart=/bin/sh -c 'journalctl --sync; sync; echo "harmony-boot-report: journal on disk" > /dev/ttyS0'

[Install]
WantedBy=multi-user.target
`

// chainUnits are the units between the kernel and an active agent, and
// the first-boot import beside them.
const chainUnits = "systemd-journald.service systemd-udev-trigger.service systemd-fsck-root.service systemd-remount-fs.service " +
	"local-fs.target systemd-tmpfiles-setup.service harmony-network.service systemd-networkd.service " +
	"systemd-networkd-wait-online.service network-online.target harmony-data-disk.service " +
	"containerd.service harmony-images-import.service " + AgentUnit

// AgentUnit is the agent's unit: the last of chainUnits, and what both
// reporters wait for.
const AgentUnit = "harmony-agent.service"

const reportUnit = `[Unit]
Description=Report the node's runtime on the serial console (image boot test)
After=` + AgentUnit + ` harmony-images-import.service containerd.service

[Service]
Type=oneshot
TimeoutStartSec=5min
ExecStart=/bin/sh -c 'd=$(findmnt -n -o SOURCE /var/lib/etcd); if [ -n "$$d" ]; then r="$(blkid -p -s TYPE -o value $$d) $(blkid -p -s LABEL -o value $$d)"; else r=none; fi; echo "harmony-boot-report: data disk $$r" > /dev/ttyS0'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: containerd is $(systemctl is-active containerd.service)" > /dev/ttyS0'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: packaged units$(for u in ` + PackagedUnits + `; do echo -n " $$u=$(systemctl is-enabled $$u)"; done)" > /dev/ttyS0'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: images $(ctr --namespace k8s.io images ls -q | sort | tr "\\n" " ")" > /dev/ttyS0'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: kubelet $(kubelet --version)" > /dev/ttyS0'
ExecStart=-/usr/bin/timeout 90 /bin/sh -c 'until journalctl -u kubelet.service -o cat | grep -q /var/lib/kubelet/config.yaml; do sleep 1; done'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: kubelet unit $(systemctl show -p ActiveState --value kubelet.service), $(journalctl -u kubelet.service -o cat | grep -c /var/lib/kubelet/config.yaml) runs without its configuration" > /dev/ttyS0'

[Install]
WantedBy=multi-user.target
`

// PackagedUnits are the units Debian's packages ship for what the agent
// runs itself (etcd, keepalived, HAProxy as harmony-* units), what
// kube-proxy owns (IPVS), what has nothing to do without LVM (e2scrub),
// and systemd's early loads of modules nothing needs before its device is
// opened: a node image masks them all.
const PackagedUnits = "etcd.service keepalived.service haproxy.service ipvsadm.service e2scrub_reap.service e2scrub_all.timer " +
	"modprobe@drm.service modprobe@fuse.service modprobe@loop.service modprobe@dm_mod.service"

// AgentReport matches the reporter's first line; its group is the agent's
// state ("active" once systemd has its READY).
var AgentReport = regexp.MustCompile(`harmony-boot-report: harmony-agent is ([a-z]+)`)

// JournalReport is the agent reporter's last line: the journal is on the
// disk, and a copy of it taken now holds the boot.
var JournalReport = regexp.MustCompile(`harmony-boot-report: journal on disk`)

// The reporter's other lines: containerd's state, the images containerd
// holds (space-separated references), the kubelet's version.
var (
	ContainerdReport = regexp.MustCompile(`harmony-boot-report: containerd is ([a-z]+)`)
	// Each of PackagedUnits with systemctl is-enabled's answer:
	// "etcd.service=masked …".
	PackagedUnitsReport = regexp.MustCompile(`harmony-boot-report: packaged units ([^\r\n]*)`)
	ImagesReport        = regexp.MustCompile(`harmony-boot-report: images ([^\r\n]*)`)
	// What is mounted at /var/lib/etcd: its type and label as blkid
	// probes them on the disk ("ext4 harmony-data"; findmnt's label comes
	// from udev's record, which can still hold the label mkfs gave before
	// e2label changed it), or "none".
	DataDiskReport = regexp.MustCompile(`harmony-boot-report: data disk ([^\r\n]*)`)
	KubeletReport  = regexp.MustCompile(`harmony-boot-report: kubelet Kubernetes (v[0-9.]+)`)
	// The kubelet unit's state, and how many of its runs said they
	// lacked the configuration kubeadm writes: the reporter's last line.
	KubeletUnitReport = regexp.MustCompile(`harmony-boot-report: kubelet unit ([a-z]+), ([0-9]+) runs without its configuration`)
)

// InjectAgentReporter adds the reporting units to the disk's root.
func InjectAgentReporter(ctx context.Context, disk string, offset int64) error {
	for name, text := range map[string]string{"harmony-boot-report-agent.service": agentReportUnit, "harmony-boot-report.service": reportUnit} {
		unit := "/etc/systemd/system/" + name
		wants := "/etc/systemd/system/multi-user.target.wants/" + name
		if err := InjectFile(ctx, disk, offset, unit, []byte(text), 0o644); err != nil {
			return err
		}
		if _, err := debugfs(ctx, disk, offset, true, fmt.Sprintf("symlink %s %s\n", wants, unit)); err != nil {
			return err
		}
		if target, err := ReadLink(ctx, disk, offset, wants); err != nil || target != unit {
			return fmt.Errorf("the reporter's wants link points at %q (%v), want %s", target, err, unit)
		}
	}
	return nil
}

// UnitTimes reads the agent reporter's unit lines from a serial console:
// for each unit that ran, when it started and when it became active, in
// seconds since the kernel started, in the order the reporter printed.
func UnitTimes(serial string) []UnitTime {
	var out []UnitTime
	for _, m := range unitReport.FindAllStringSubmatch(serial, -1) {
		started, err1 := strconv.ParseInt(m[2], 10, 64)
		active, err2 := strconv.ParseInt(m[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, UnitTime{Unit: m[1], Started: float64(started) / 1e6, Active: float64(active) / 1e6})
	}
	return out
}

// UnitTime is one unit's start and activation; 0 means never.
type UnitTime struct {
	Unit            string
	Started, Active float64
}

var unitReport = regexp.MustCompile(`harmony-boot-report: unit (\S+) ([0-9]+) ([0-9]+)`)
