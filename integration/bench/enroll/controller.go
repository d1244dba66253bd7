package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
)

// controllerProc is the harmony-controller under test.
type controllerProc struct {
	*child
	bin      string
	goVer    string
	url      string
	adminCfg *clientconfig.Config
	admin    *client.Client
	metrics  *http.Client
}

// startController runs bin/harmony-controller serve on a loopback port and
// waits until /healthz answers.
func startController(ctx context.Context, binDir, tmp string) (*controllerProc, error) {
	bin, err := filepath.Abs(filepath.Join(binDir, "harmony-controller"))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("controller binary: %w (run make build, or set HARMONY_BIN to the directory holding it)", err)
	}
	goVer := "unknown"
	if info, err := buildinfo.ReadFile(bin); err == nil {
		goVer = info.GoVersion
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(tmp, "controller")
	ch, err := startChild("controller", filepath.Join(tmp, "controller.log"), bin,
		"serve", "--data-dir", dataDir, "--listen", addr)
	if err != nil {
		return nil, err
	}
	p := &controllerProc{child: ch, bin: bin, goVer: goVer, url: "https://" + addr}
	if err := p.waitReady(ctx, filepath.Join(dataDir, controller.AdminConfigFile)); err != nil {
		_ = ch.stop(10 * time.Second)
		return nil, err
	}
	return p, nil
}

func (p *controllerProc) waitReady(ctx context.Context, adminConf string) error {
	ctx, cancel := phase(ctx, 30*time.Second)
	defer cancel()
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		if p.admin == nil {
			cfg, err := clientconfig.Load(adminConf)
			if errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if cfg.Server != p.url {
				return false, fmt.Errorf("admin.conf names server %s, want %s", cfg.Server, p.url)
			}
			if p.admin, err = client.New(cfg, ""); err != nil {
				return false, err
			}
			if p.metrics, err = adminHTTP(cfg); err != nil {
				return false, err
			}
			p.adminCfg = cfg
		}
		reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return p.admin.Health(reqCtx) == nil, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the controller at %s: %w", p.url, err)
	}
	return nil
}

// newAdmin returns another admin client. Each has its own transport; one
// shared by many workers keeps only two idle connections and would open
// extra TLS connections as the workers take turns.
func (p *controllerProc) newAdmin() (*client.Client, error) {
	return client.New(p.adminCfg, "")
}

// adminHTTP is a plain HTTP client with the admin credential, for /metrics:
// client.Client decodes only JSON answers.
func adminHTTP(cfg *clientconfig.Config) (*http.Client, error) {
	tlsConf, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: 30 * time.Second}, nil
}

// metricsText fetches the controller's /metrics.
func (p *controllerProc) metricsText(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+v1.PathMetrics, nil)
	if err != nil {
		return "", err
	}
	resp, err := p.metrics.Do(req)
	if err != nil {
		return "", fmt.Errorf("get %s: %w", v1.PathMetrics, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", v1.PathMetrics, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("get %s: status %d: %s", v1.PathMetrics, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return string(data), nil
}

// metric reads one unlabelled sample from the controller's /metrics.
func (p *controllerProc) metric(ctx context.Context, name string) (float64, error) {
	text, err := p.metricsText(ctx)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return 0, fmt.Errorf("metric %s: %w", name, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("metric %s not found in %s", name, v1.PathMetrics)
}

var versionLabel = regexp.MustCompile(`harmony_controller_build_info\{[^}]*\bversion="([^"]*)"`)

// version is the controller's build version, from its build_info metric.
func (p *controllerProc) version(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	text, err := p.metricsText(ctx)
	if err != nil {
		return "unknown"
	}
	if m := versionLabel.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return "unknown"
}
