package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/internal/promconfig"
)

// startPrometheus writes the scrape config for the lab's controller and
// starts Debian's Prometheus on the lab's .1. It finds the cluster's
// nodes through the controller, at the addresses the controller
// allocated.
func startPrometheus(ctx context.Context, cfg *Config, r *record, ctl *client.Client) error {
	dir := filepath.Join(cfg.StateDir, "prometheus")
	confPath, err := writeScrapeConfig(ctx, dir, ctl, netip.AddrPortFrom(addr(cfg.Subnet, 1), controllerPort))
	if err != nil {
		return err
	}
	listen := netip.AddrPortFrom(addr(cfg.Subnet, 1), prometheusPort)
	cfg.Log.Info("lab: prometheus", "listen", listen)
	_, err = launchPrometheus(ctx, r, confPath, filepath.Join(dir, "data"), listen)
	return err
}

// writeScrapeConfig issues a scraper certificate from the controller at
// controller and writes it into dir, with Harmony's scrape config and
// alerting rules (promconfig), which promtool checks. It returns the
// config's path.
func writeScrapeConfig(ctx context.Context, dir string, ctl *client.Client, controller netip.AddrPort) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	const name = "lab-prometheus"
	cred, err := ctl.IssueScraperCert(ctx, name)
	if err != nil {
		return "", fmt.Errorf("lab: scraper certificate: %w", err)
	}
	if _, _, _, err := promconfig.WriteCredential(dir, name, promconfig.Credential{Key: cred.Key, Certificate: cred.Certificate, CA: cred.CABundle}); err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	confPath, err := promconfig.WriteConfig(dir, name, &url.URL{Scheme: "https", Host: controller.String()})
	if err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "promtool", "check", "config", confPath).CombinedOutput(); err != nil {
		return "", fmt.Errorf("lab: promtool check config: %w: %s", err, out)
	}
	return confPath, nil
}

// launchPrometheus starts Prometheus detached, records it in r, and waits
// until it answers on listen with confPath as its configuration. Another
// Prometheus on the same address (a lab left running) would otherwise
// answer in its place, with the other lab's targets, while ours has
// exited on "address already in use".
func launchPrometheus(ctx context.Context, r *record, confPath, dataDir string, listen netip.AddrPort) (procRecord, error) {
	logPath := filepath.Join(r.logsDir(), "prometheus.log")
	proc, err := startDetached([]string{"/usr/bin/prometheus",
		"--config.file=" + confPath,
		"--storage.tsdb.path=" + dataDir,
		"--web.listen-address=" + listen.String(),
		"--storage.tsdb.retention.time=1d",
	}, logPath)
	if err != nil {
		return proc, fmt.Errorf("lab: %w", err)
	}
	proc.Name = "prometheus"
	// Recorded before the wait, so that `lab down` finds it also when
	// this process is killed while Prometheus starts.
	r.Procs = append(r.Procs, proc)
	if err := r.save(); err != nil {
		killAll(ctx, []int{proc.PID}, 5*time.Second)
		return proc, err
	}
	err = poll(ctx, time.Minute, func() error {
		if !proc.Alive() {
			return errStop{fmt.Errorf("prometheus exited; see %s", logPath)}
		}
		file, err := prometheusConfigFile(ctx, listen)
		if err != nil {
			return err
		}
		if file != confPath {
			return errStop{fmt.Errorf("another Prometheus answers on %s (its config.file is %q); stop it, or the lab's would not be the one scraped", listen, file)}
		}
		return nil
	})
	if err != nil {
		killAll(ctx, []int{proc.PID}, 5*time.Second)
		return proc, fmt.Errorf("lab: prometheus: %w", err)
	}
	return proc, nil
}

// prometheusConfigFile asks the Prometheus on listen which configuration
// file it runs with.
func prometheusConfigFile(ctx context.Context, listen netip.AddrPort) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+listen.String()+"/api/v1/status/flags", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status flags: %s", resp.Status)
	}
	var body struct {
		Data map[string]string `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return "", fmt.Errorf("status flags: %w", err)
	}
	return body.Data["config.file"], nil
}

func jsonIndent(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	return append(data, '\n'), err
}
