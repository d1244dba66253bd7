// Package client is the admin API client that harmonyctl uses.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/clientconfig"
)

// Client calls the API with the credential of a client config: a user's
// session, refreshed as it nears its end, or an admin certificate.
type Client struct {
	server string
	http   *http.Client
	// upload has no overall timeout: an OVA takes as long as it takes.
	upload *http.Client

	mu      sync.Mutex
	session *clientconfig.Session
	// saveSession keeps a refreshed session (in the config file).
	saveSession func(*clientconfig.Session) error
}

// refreshBefore is how long before its end an access token is replaced.
const refreshBefore = 30 * time.Second

// OnSessionRefresh sets where a refreshed session is kept.
func (c *Client) OnSessionRefresh(save func(*clientconfig.Session) error) { c.saveSession = save }

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
	c := &Client{
		server: strings.TrimSuffix(server, "/"),
		// Above the controller's longest watch (2 minutes).
		http:   &http.Client{Transport: transport, Timeout: 3 * time.Minute},
		upload: &http.Client{Transport: transport},
	}
	if cfg.Session != nil {
		s := *cfg.Session
		c.session = &s
	}
	return c, nil
}

// authorize puts the session's access token on req, refreshing it first
// when, by this machine's clock, it is about to end.
func (c *Client) authorize(ctx context.Context, req *http.Request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == nil {
		return nil
	}
	if time.Until(c.session.AccessExpiresAt) < refreshBefore {
		if err := c.refresh(ctx); err != nil {
			return err
		}
	}
	req.Header.Set("Authorization", "Bearer "+c.session.AccessToken)
	return nil
}

// refreshAfterRefusal refreshes a session whose access token the
// controller refused (its clock may run ahead of this machine's); it
// reports whether the request is worth sending again.
func (c *Client) refreshAfterRefusal(ctx context.Context, refused string, err error) bool {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Body.Code != v1.CodeSessionInvalid {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == nil {
		return false
	}
	if c.session.AccessToken != refused {
		return true // another request refreshed it meanwhile
	}
	return c.refresh(ctx) == nil
}

// refresh replaces the session's tokens; c.mu is held.
func (c *Client) refresh(ctx context.Context) error {
	var fresh v1.Session
	r, err := http.NewRequestWithContext(ctx, "POST", c.server+v1.PathRefresh, jsonBody(v1.RefreshRequest{RefreshToken: c.session.RefreshToken}))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	if err := c.send(c.http, r, &fresh); err != nil {
		return fmt.Errorf("refresh the session of %s (run harmonyctl login again if it has ended): %w", c.session.Username, err)
	}
	c.session = clientconfig.FromAPI(fresh)
	if c.saveSession != nil {
		if err := c.saveSession(c.session); err != nil {
			return fmt.Errorf("keep the refreshed session: %w", err)
		}
	}
	return nil
}

func jsonBody(v any) io.Reader {
	data, _ := json.Marshal(v)
	return bytes.NewReader(data)
}

// Do sends one request and decodes a 2xx body into out. A session's
// access token that the controller refuses is refreshed, and the request
// sent once more.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(data)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.server+path, rd)
		if err != nil {
			return err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if err := c.authorize(ctx, req); err != nil {
			return err
		}
		err = c.send(c.http, req, out)
		sent, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if err == nil || attempt > 0 || sent == "" || !c.refreshAfterRefusal(ctx, sent, err) {
			return err
		}
	}
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
	if err := c.authorize(ctx, req); err != nil {
		return 0, err
	}
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
