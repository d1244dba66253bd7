// Package client is the admin API client that harmonyctl uses.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/clientconfig"
)

// Client calls the admin API with the admin credential of a client config.
type Client struct {
	server string
	http   *http.Client
	// upload has no overall timeout: an OVA takes as long as it takes.
	upload *http.Client
}

// APIError is a JSON error answer.
type APIError struct {
	Status int
	Body   v1.Error
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s (%d %s)", e.Body.Message, e.Status, e.Body.Code)
	if e.Body.Field != "" {
		msg = e.Body.Field + ": " + msg
	}
	return msg
}

// New returns a client for cfg; server overrides cfg.Server when set.
func New(cfg *clientconfig.Config, server string) (*Client, error) {
	tlsConf, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	if server == "" {
		server = cfg.Server
	}
	if err := v1.ValidateControllerURL(server); err != nil {
		return nil, fmt.Errorf("server %q: %w", server, err)
	}
	transport := &http.Transport{TLSClientConfig: tlsConf}
	return &Client{
		server: strings.TrimSuffix(server, "/"),
		// Above the controller's longest watch (2 minutes).
		http:   &http.Client{Transport: transport, Timeout: 3 * time.Minute},
		upload: &http.Client{Transport: transport},
	}, nil
}

// Do sends one request and decodes a 2xx body into out.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.send(c.http, req, out)
}

// Upload streams a file body, such as an OVA, and decodes a 2xx answer
// into out; it returns the status.
func (c *Client) Upload(ctx context.Context, path string, body io.Reader, size int64, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", c.server+path, body)
	if err != nil {
		return 0, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	var status int
	err = c.send(c.upload, req, out, &status)
	return status, err
}

func (c *Client) send(hc *http.Client, req *http.Request, out any, status ...*int) error {
	method, path := req.Method, req.URL.Path
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	for _, s := range status {
		*s = resp.StatusCode
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		var eb v1.ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			eb.Error = v1.Error{Code: "http_error", Message: strings.TrimSpace(string(data))}
		}
		return &APIError{Status: resp.StatusCode, Body: eb.Error}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// NodePath is the admin path of one node, with an optional suffix.
func NodePath(name, suffix string) string {
	return v1.PathNodes + "/" + url.PathEscape(name) + suffix
}
