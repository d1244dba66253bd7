package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
)

// localAPI is this master's own apiserver. kubeadm's serving certificate
// has no loopback name, so TLS checks the name "kubernetes", which every
// kubeadm apiserver certificate carries.
const (
	localAPI        = "https://127.0.0.1:6443"
	apiServerName   = "kubernetes"
	readyzTimeout   = 5 * time.Second
	maxReadyzAnswer = 64 << 10
)

// apiClient reaches the local apiserver, verified with the cluster CA
// written under the host's root, never through a proxy.
func (c *Component) apiClient(host *reconcile.Host, cert *tls.Certificate) (*http.Client, error) {
	caPEM, err := kubeapi.ReadBounded(host.Path(CACertFile))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", CACertFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", CACertFile)
	}
	tlsConf := &tls.Config{RootCAs: pool, ServerName: apiServerName, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tlsConf.Certificates = []tls.Certificate{*cert}
	}
	dial := c.cfg.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: readyzTimeout}).DialContext
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:             nil,
		DialContext:       dial,
		TLSClientConfig:   tlsConf,
		DisableKeepAlives: true,
	}}, nil
}

// kubeletHealthy asks the kubelet's own health endpoint: a node whose
// kubelet joined but then keeps failing (its container manager cannot
// start, say) is not a healthy node, whatever kubeadm join said.
func (c *Component) kubeletHealthy(ctx context.Context) error {
	dial := c.cfg.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: readyzTimeout}).DialContext
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: dial, DisableKeepAlives: true}}
	if err := healthCheck(ctx, client, c.cfg.KubeletHealthURL); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	return nil
}

// ready asks the local apiserver's /readyz, anonymously (kubeadm leaves
// anonymous health checks allowed), verified with the role's cluster CA.
func (c *Component) ready(ctx context.Context, host *reconcile.Host) error {
	client, err := c.apiClient(host, nil)
	if err != nil {
		return err
	}
	return healthCheck(ctx, client, localAPI+"/readyz")
}

// healthCheck GETs a Kubernetes health endpoint (/readyz, /healthz): nil
// for 200, else an error with the failing checks it lists.
func healthCheck(ctx context.Context, client *http.Client, endpoint string) error {
	name := endpoint
	if u, err := url.Parse(endpoint); err == nil {
		name = u.Path
	}
	ctx, cancel := context.WithTimeout(ctx, readyzTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("GET %s: %w", name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxReadyzAnswer))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", name, resp.Status, failingChecks(string(body)))
	}
	return nil
}

// failingChecks keeps the "[-]check failed" lines of a /readyz answer.
func failingChecks(body string) string {
	var failing []string
	for line := range strings.Lines(body) {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "[-]") {
			failing = append(failing, strings.TrimPrefix(line, "[-]"))
		}
	}
	if len(failing) == 0 {
		return strings.TrimSpace(body)
	}
	return strings.Join(failing, ", ")
}
