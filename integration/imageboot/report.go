package imageboot

import (
	"context"
	"fmt"
	"regexp"
)

// systemd prints "Started …" on the console only while the boot's own
// jobs run; harmony-agent (Type=notify) becomes active after that, once
// it has enrolled and made its first pass. So a tiny unit ordered after
// it, and after the first-boot import of the container images, reports on
// the serial console: the agent's state, containerd's, the images
// containerd holds for the kubelet, the kubelet's own version, and its
// unit: before kubeadm has run, the kubelet starts, finds no
// /var/lib/kubelet/config.yaml and is restarted until kubeadm writes one
// (the unit's state is activating or, between restarts, active). Tests
// add it to their copy of the disk; images never carry it.
const reportUnit = `[Unit]
Description=Report harmony-agent's state on the serial console (image boot test)
Wants=harmony-agent.service
After=harmony-agent.service harmony-images-import.service containerd.service

[Service]
Type=oneshot
TimeoutStartSec=5min
# The agent's line first: the boot benchmark's clock stops at it.
ExecStart=/bin/sh -c 'echo "harmony-boot-report: harmony-agent is $(systemctl is-active harmony-agent.service)" > /dev/ttyS0'
ExecStart=/bin/sh -c 'd=$(findmnt -n -o SOURCE /var/lib/etcd); if [ -n "$$d" ]; then r="$(blkid -p -s TYPE -o value $$d) $(blkid -p -s LABEL -o value $$d)"; else r=none; fi; echo "harmony-boot-report: data disk $$r" > /dev/ttyS0'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: containerd is $(systemctl is-active containerd.service)" > /dev/ttyS0'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: images $(ctr --namespace k8s.io images ls -q | sort | tr "\\n" " ")" > /dev/ttyS0'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: kubelet $(kubelet --version)" > /dev/ttyS0'
ExecStart=-/usr/bin/timeout 90 /bin/sh -c 'until journalctl -u kubelet.service -o cat | grep -q /var/lib/kubelet/config.yaml; do sleep 1; done'
ExecStart=/bin/sh -c 'echo "harmony-boot-report: kubelet unit $(systemctl show -p ActiveState --value kubelet.service), $(journalctl -u kubelet.service -o cat | grep -c /var/lib/kubelet/config.yaml) runs without its configuration" > /dev/ttyS0'

[Install]
WantedBy=multi-user.target
`

// AgentReport matches the reporter's first line; its group is the agent's
// state ("active" once systemd has its READY).
var AgentReport = regexp.MustCompile(`harmony-boot-report: harmony-agent is ([a-z]+)`)

// The reporter's other lines: containerd's state, the images containerd
// holds (space-separated references), the kubelet's version.
var (
	ContainerdReport = regexp.MustCompile(`harmony-boot-report: containerd is ([a-z]+)`)
	ImagesReport     = regexp.MustCompile(`harmony-boot-report: images ([^\r\n]*)`)
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

// InjectAgentReporter adds the reporting unit to the disk's root.
func InjectAgentReporter(ctx context.Context, disk string, offset int64) error {
	const unit = "/etc/systemd/system/harmony-boot-report.service"
	if err := InjectFile(ctx, disk, offset, unit, []byte(reportUnit), 0o644); err != nil {
		return err
	}
	_, err := debugfs(ctx, disk, offset, true, fmt.Sprintf(
		"symlink /etc/systemd/system/multi-user.target.wants/harmony-boot-report.service %s\n", unit))
	if err != nil {
		return err
	}
	out, err := Debugfs(ctx, disk, offset, "stat /etc/systemd/system/multi-user.target.wants/harmony-boot-report.service\n")
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`Type: symlink`).MatchString(out) {
		return fmt.Errorf("the reporter's wants link is not a symlink:\n%s", out)
	}
	return nil
}
