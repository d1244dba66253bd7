package lab

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"text/template"

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
	listen := netip.AddrPortFrom(addr(cfg.Subnet, 1), prometheusPort).String()
	cfg.Log.Info("lab: prometheus", "listen", listen)
	proc, err := startDetached([]string{"/usr/bin/prometheus",
		"--config.file=" + confPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + listen,
		"--storage.tsdb.retention.time=1d",
	}, filepath.Join(r.logsDir(), "prometheus.log"))
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	proc.Name = "prometheus"
	r.Procs = append(r.Procs, proc)
	return r.save()
}

func jsonIndent(v any) ([]byte, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	return append(data, '\n'), err
}
