package kubeadm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
)

// localAPI is this master's own apiserver. kubeadm's serving certificate
// has no loopback name, so TLS checks the name "kubernetes", which every
// kubeadm apiserver certificate carries.
const (
	localAPI      = "https://127.0.0.1:6443"
	apiServerName = "kubernetes"
	readyzTimeout = 5 * time.Second
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
	if err := kubeapi.HealthCheck(ctx, client, c.cfg.KubeletHealthURL, readyzTimeout); err != nil {
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
	return kubeapi.HealthCheck(ctx, client, localAPI+"/readyz", readyzTimeout)
}
