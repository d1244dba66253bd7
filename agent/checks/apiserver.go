// Package checks holds the health checks that daemons run through
// `harmony-agent check ...`, such as keepalived's track script.
package checks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// APIServer checks, at L7, that the local HAProxy answers on its metrics
// endpoint and that the local kube-apiserver's /readyz answers 200. Either
// failing means this master should not hold the API VIP.
type APIServer struct {
	// HAProxyURL is HAProxy's local metrics or stats URL (plain HTTP on
	// loopback), e.g. http://127.0.0.1:8404/metrics.
	HAProxyURL string
	// ReadyzURL is the local apiserver's readiness URL, e.g.
	// https://127.0.0.1:6443/readyz.
	ReadyzURL string
	// CAFile verifies the apiserver's certificate; without it the check
	// still proves an L7 answer from loopback, not the server's identity.
	CAFile string
	// ServerName is the name the apiserver's certificate must carry, such
	// as "kubernetes" (kubeadm's serving certificates have no loopback
	// SAN); empty checks the URL's host.
	ServerName string
	Timeout    time.Duration
}

// Run returns nil when both answer 200 within the timeout.
func (c APIServer) Run(ctx context.Context) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pemData, err := os.ReadFile(c.CAFile)
		if err != nil {
			return fmt.Errorf("read CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemData) {
			return fmt.Errorf("%s holds no certificate", c.CAFile)
		}
		tlsConf.RootCAs = pool
		tlsConf.ServerName = c.ServerName
	} else {
		tlsConf.InsecureSkipVerify = true // loopback liveness only; see CAFile
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, DisableKeepAlives: true}}
	var errs []error
	for _, u := range []string{c.HAProxyURL, c.ReadyzURL} {
		if u == "" {
			continue
		}
		if err := get(ctx, client, u); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
