// Package integration holds tests across processes and components: a real
// controller and real agents talking TLS over loopback, in process here and
// as separate binaries in quickstart_test.go.
package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/internal/atomicfile"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// logBuffer collects a component's log.
type logBuffer = testutil.LogBuffer

type ctl struct {
	c     *controller.Controller
	dir   string
	admin *client.Client
	cfg   *clientconfig.Config
	logs  *logBuffer
	// stop shuts the controller down and closes it; the test's cleanup
	// does it too.
	stop func()
}

func startController(t *testing.T, mutate ...func(*controller.Config)) *ctl {
	t.Helper()
	logs := &logBuffer{}
	cfg := controller.Config{
		DataDir: t.TempDir(),
		Listen:  "127.0.0.1:0",
		Logger:  slog.New(slog.NewTextHandler(logs, nil)),
	}
	for _, m := range mutate {
		m(&cfg)
	}
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Serve(ctx)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			c.Close()
		})
	}
	t.Cleanup(stop)
	adminCfg, err := clientconfig.Load(filepath.Join(cfg.DataDir, controller.AdminConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(adminCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	return &ctl{c: c, dir: cfg.DataDir, admin: admin, cfg: adminCfg, logs: logs, stop: stop}
}

func (c *ctl) addNode(t *testing.T, spec v1.NodeSpec) v1.Bootstrap {
	t.Helper()
	if spec.Cluster == "" {
		spec.Cluster = "demo"
	}
	if spec.Role == "" {
		spec.Role = v1.RoleWorker
	}
	if spec.IPs == nil {
		spec.IPs = []string{"127.0.0.1"}
	}
	var res v1.NodeWithBootstrap
	if err := c.admin.Do(context.Background(), "POST", v1.PathNodes, spec, &res); err != nil {
		t.Fatalf("add node %s: %v", spec.Name, err)
	}
	return res.Bootstrap
}

func (c *ctl) node(t *testing.T, name string) v1.Node {
	t.Helper()
	var n v1.Node
	if err := c.admin.Do(context.Background(), "GET", client.NodePath(name, ""), nil, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (c *ctl) role(t *testing.T, name string) v1.Role {
	t.Helper()
	var r v1.Role
	if err := c.admin.Do(context.Background(), "GET", client.NodePath(name, "/role"), nil, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (c *ctl) setRole(t *testing.T, r v1.Role) v1.Role {
	t.Helper()
	var out v1.Role
	if err := c.admin.Do(context.Background(), "PUT", client.NodePath(r.NodeName, "/role"), r, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (c *ctl) metric(t *testing.T, name string) float64 {
	t.Helper()
	families, err := c.c.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			full := f.GetName()
			for _, l := range m.GetLabel() {
				full += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			if full == name {
				switch {
				case m.Counter != nil:
					total += m.Counter.GetValue()
				case m.Gauge != nil:
					total += m.Gauge.GetValue()
				}
			}
		}
	}
	return total
}

func writeBootstrap(t *testing.T, path string, b v1.Bootstrap) {
	t.Helper()
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

type runningAgent struct {
	a     *agent.Agent
	cfg   agent.Config
	logs  *logBuffer
	roles chan v1.Role
	stop  func()
}

func startAgent(t *testing.T, cfg agent.Config) *runningAgent {
	t.Helper()
	logs := &logBuffer{}
	ra := &runningAgent{logs: logs, roles: make(chan v1.Role, 16)}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	if cfg.Addresses == nil {
		cfg.Addresses = []string{"127.0.0.1"}
	}
	cfg.RetryBase = 50 * time.Millisecond
	cfg.RetryMax = 500 * time.Millisecond
	cfg.BootstrapPoll = 200 * time.Millisecond
	cfg.OnRole = func(_ context.Context, r v1.Role) {
		select {
		case ra.roles <- r:
		default:
		}
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ra.a, ra.cfg = a, cfg
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	var once sync.Once
	ra.stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(ra.stop)
	return ra
}

// waitRole waits for a role with at least revision rev.
func (ra *runningAgent) waitRole(t *testing.T, rev int64) v1.Role {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-ra.roles:
			if r.Revision >= rev {
				return r
			}
		case <-deadline:
			t.Fatalf("no role of revision >= %d; agent log:\n%s", rev, ra.logs.String())
		}
	}
}

// eventually waits for cond with a generous bound.
func eventually(t *testing.T, what string, cond func() bool, explain ...func()) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, cond, explain...)
}

// scrape GETs url with an optional client certificate, trusting caPEM.
func scrape(caPEM []byte, cert *tls.Certificate, url string) (int, string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conf := &tls.Config{RootCAs: pool}
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
