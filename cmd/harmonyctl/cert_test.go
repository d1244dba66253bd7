package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/client"
	"github.com/harmonykaas/harmony/controller/clientconfig"
	"github.com/harmonykaas/harmony/internal/promconfig"
)

func runCommand(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// cert renew-admin through the command: the config (behind a symlink)
// gets a new key and certificate in place, and the old certificate is
// refused from then on; the list marks the new one as in use.
func TestCertRenewAdminRewritesConfigAndRevokesTheOld(t *testing.T) {
	g, oldAdmin := startTestController(t)
	real := g.config
	link := filepath.Join(t.TempDir(), "config")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	g.config = link
	before, _ := os.ReadFile(real)

	if out, err := runCommand(t, certRenewAdminCommand(g)); err != nil {
		t.Fatalf("renew-admin: %v\n%s", err, out)
	}
	if info, err := os.Lstat(link); err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the config's symlink was replaced")
	}
	after, _ := os.ReadFile(real)
	if string(after) == string(before) {
		t.Fatal("the config was not rewritten")
	}
	if info, _ := os.Stat(real); info.Mode().Perm() != 0o600 {
		t.Fatalf("config mode %04o", info.Mode().Perm())
	}
	_, err := oldAdmin.Nodes(context.Background())
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Body.Code != v1.CodeCertRevoked {
		t.Fatalf("the old admin certificate after renew-admin: %v", err)
	}
	cfg, err := clientconfig.Load(real)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := client.New(cfg, g.server)
	if err != nil {
		t.Fatal(err)
	}
	list, err := renewed.Certificates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	current, revoked := 0, 0
	for _, c := range list.Items {
		if c.Current {
			current++
		}
		if !c.RevokedAt.IsZero() {
			revoked++
		}
	}
	if len(list.Items) != 2 || current != 1 || revoked != 1 {
		t.Fatalf("certificates after renew-admin: %+v", list.Items)
	}
}

// cert scraper --prometheus-config leaves a Prometheus configuration that
// promtool accepts, aimed at this controller, beside a certificate that
// scrapes it.
func TestCertScraperWritesAPrometheusConfig(t *testing.T) {
	g, _ := startTestController(t)
	dir := filepath.Join(t.TempDir(), "prom")
	if out, err := runCommand(t, certScraperCommand(g), "prometheus", "--out-dir", dir, "--prometheus-config"); err != nil {
		t.Fatalf("cert scraper: %v\n%s", err, out)
	}
	conf := filepath.Join(dir, promconfig.ConfigFile)
	if out, err := exec.Command("promtool", "check", "config", conf).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if want := "url: " + g.server + v1.PathMetricsTargets; !strings.Contains(string(data), want) {
		t.Errorf("prometheus.yml lacks %q:\n%s", want, data)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "prometheus.crt"), filepath.Join(dir, "prometheus.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, promconfig.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	scraper := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	resp, err := scraper.Get(g.server + v1.PathMetricsTargets)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the written certificate reads the service discovery: %s, want 200", resp.Status)
	}
}
