package imageboot

import (
	"context"
	"fmt"
	"regexp"
)

// systemd prints "Started …" on the console only while the boot's own
// jobs run; harmony-agent (Type=notify) becomes active after that, once
// it has enrolled and made its first pass. So a tiny unit ordered after
// it reports the agent's state on the serial console. Tests add it to
// their copy of the disk; images never carry it.
const reportUnit = `[Unit]
Description=Report harmony-agent's state on the serial console (image boot test)
Wants=harmony-agent.service
After=harmony-agent.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo "harmony-boot-report: harmony-agent is $(systemctl is-active harmony-agent.service)" > /dev/ttyS0'

[Install]
WantedBy=multi-user.target
`

// AgentReport matches the reporter's line; its group is the agent's state
// ("active" once systemd has its READY).
var AgentReport = regexp.MustCompile(`harmony-boot-report: harmony-agent is ([a-z]+)`)

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
