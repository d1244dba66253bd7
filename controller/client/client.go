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
	return &Client{
		server: strings.TrimSuffix(server, "/"),
		http:   &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: time.Minute},
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
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
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
