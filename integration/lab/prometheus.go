package lab

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"text/template"
	"time"

	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/internal/atomicfile"
)

// prometheusConfig is the scrape config the lab generates; it is also
// the reference for scraping Harmony anywhere.
//
//go:embed prometheus.yml.tmpl
var prometheusConfig string

var prometheusTemplate = template.Must(template.New("prometheus.yml").Parse(prometheusConfig))

type scrapeTarget struct{ Target, Node, Role string }

type prometheusParams struct {
	Cluster, CA, Cert, Key, Controller string
	Agents                             []scrapeTarget
}

// startPrometheus issues a scraper certificate, writes the scrape config,
// checks it with promtool and starts Debian's Prometheus on the lab's .1.
// Its targets are the cluster's nodes, at the addresses the controller
// allocated.
func startPrometheus(ctx context.Context, cfg *Config, r *record, ctl *client.Client, nodes []NodeSummary) error {
	dir := filepath.Join(cfg.StateDir, "prometheus")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	cred, err := ctl.IssueScraperCert(ctx, "lab-prometheus")
	if err != nil {
		return fmt.Errorf("lab: scraper certificate: %w", err)
	}
	params := prometheusParams{
		Cluster:    ClusterName,
		CA:         filepath.Join(dir, "ca.crt"),
		Cert:       filepath.Join(dir, "scraper.crt"),
		Key:        filepath.Join(dir, "scraper.key"),
		Controller: netip.AddrPortFrom(addr(cfg.Subnet, 1), controllerPort).String(),
	}
	for _, f := range []struct {
		path string
		data []byte
		perm os.FileMode
	}{{params.CA, cred.CABundle, 0o644}, {params.Cert, cred.Certificate, 0o644}, {params.Key, cred.Key, 0o600}} {
		if err := atomicfile.Write(f.path, f.data, f.perm); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	for _, n := range nodes {
		ip, err := netip.ParseAddr(n.IP)
		if err != nil {
			return fmt.Errorf("lab: node %s: address %q: %w", n.Name, n.IP, err)
		}
		params.Agents = append(params.Agents, scrapeTarget{
			Target: netip.AddrPortFrom(ip, agentMetricPort).String(), Node: n.Name, Role: n.Role,
		})
	}
	var buf bytes.Buffer
	if err := prometheusTemplate.Execute(&buf, params); err != nil {
		return err
	}
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := atomicfile.Write(confPath, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "promtool", "check", "config", confPath).CombinedOutput(); err != nil {
		return fmt.Errorf("lab: promtool check config: %w: %s", err, out)
	}
	listen := netip.AddrPortFrom(addr(cfg.Subnet, 1), prometheusPort)
	cfg.Log.Info("lab: prometheus", "listen", listen)
	_, err = launchPrometheus(ctx, r, confPath, filepath.Join(dir, "data"), listen)
	return err
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
