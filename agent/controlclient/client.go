// Package controlclient is the agent's HTTPS client for the controller. It
// tries every controller URL in turn, classifies failures into a small set
// of reasons for logs and metrics, and retries with exponential backoff
// and full jitter.
package controlclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// maxResponseBytes bounds what the agent reads from a controller.
const maxResponseBytes = 2 << 20

// RefusedError is a 4xx answer: the controller understood and said no.
// Trying another controller URL would get the same answer.
type RefusedError struct {
	Status  int
	Code    string
	Message string
	Field   string
	URL     string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s refused (%d %s): %s", e.URL, e.Status, e.Code, e.Message)
}

// Permanent reports whether retrying the same request cannot succeed
// until something changes (a new token, a new node record).
func (e *RefusedError) Permanent() bool {
	switch e.Code {
	case v1.CodeTokenUsed, v1.CodeTokenExpired, v1.CodeTokenUnknown, v1.CodeTokenMalformed,
		v1.CodeCNMismatch, v1.CodeSANNotInventory, v1.CodeWeakKey, v1.CodeNodeGone,
		v1.CodeBadClientCert, v1.CodeForbidden, v1.CodeCSRInvalid, v1.CodeCSRSignature:
		return true
	}
	return false
}

// Reason maps an error to a bounded label: an API code from a refusal, or
// connect, tls, timeout, server_error, bad_response, other.
func Reason(err error) string {
	var refused *RefusedError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var netErr net.Error
	var opErr *net.OpError
	var serverErr *serverError
	var badResp *badResponseError
	switch {
	case errors.As(err, &refused):
		if knownCodes[refused.Code] {
			return refused.Code
		}
		return "refused"
	case errors.As(err, &serverErr):
		return "server_error"
	case errors.As(err, &badResp):
		return "bad_response"
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr),
		strings.Contains(fmt.Sprint(err), "tls:"):
		return "tls"
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &opErr):
		return "connect"
	}
	return "other"
}

var knownCodes = map[string]bool{}

func init() {
	for _, c := range []string{v1.CodeBadRequest, v1.CodeBodyTooLarge, v1.CodeTokenMalformed, v1.CodeTokenUnknown,
		v1.CodeTokenExpired, v1.CodeTokenUsed, v1.CodeCSRInvalid, v1.CodeCSRSignature, v1.CodeWeakKey,
		v1.CodeCNMismatch, v1.CodeSANNotInventory, v1.CodeNoClientCert, v1.CodeBadClientCert,
		v1.CodeForbidden, v1.CodeNodeGone, v1.CodeNotFound, v1.CodeConflict} {
		knownCodes[c] = true
	}
}

// Unavailable reports whether err is the controller saying it is
// shutting down or restarting (503): nothing to worry about, try again.
func Unavailable(err error) bool {
	var se *serverError
	return errors.As(err, &se) && se.status == http.StatusServiceUnavailable
}

type serverError struct {
	url    string
	status int
	body   string
}

func (e *serverError) Error() string {
	return fmt.Sprintf("%s answered %d: %s", e.url, e.status, e.body)
}

type badResponseError struct {
	url string
	err error
}

func (e *badResponseError) Error() string { return fmt.Sprintf("%s: bad response: %v", e.url, e.err) }

// Client talks to one controller deployment through any of its URLs.
type Client struct {
	urls      []string
	tlsConf   *tls.Config
	http      atomic.Pointer[http.Client]
	preferred atomic.Int32
	// OnError observes every failed attempt (for metrics).
	OnError func(reason string)
}

// New returns a client that trusts roots and presents the certificate
// that getCert returns, if any.
func New(urls []string, roots *x509.CertPool, getCert func() *tls.Certificate) *Client {
	// Only the controller's serving certificate will do: a node's
	// certificate chains to the same CA.
	tlsConf := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, VerifyConnection: v1.VerifyController}
	if getCert != nil {
		tlsConf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := getCert(); c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil
		}
	}
	return newClient(urls, tlsConf)
}

func newClient(urls []string, tlsConf *tls.Config) *Client {
	c := &Client{urls: urls, tlsConf: tlsConf}
	c.http.Store(newHTTPClient(tlsConf))
	return c
}

func newHTTPClient(tlsConf *tls.Config) *http.Client {
	transport := &http.Transport{
		TLSClientConfig: tlsConf,
		// HTTP/1.1: an agent has at most a long poll and a status report in
		// flight, so HTTP/2 multiplexing buys nothing, and it costs the
		// controller a goroutine and ~13 KiB per agent (make bench).
		ForceAttemptHTTP2:     false,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 0, // long polls wait; each request has its own deadline
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   2,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	}
	return &http.Client{Transport: transport}
}

// Close drops idle connections.
func (c *Client) Close() { c.http.Load().CloseIdleConnections() }

// Rotate moves new requests to fresh connections, so that the controller
// sees a renewed client certificate: a kept-alive connection presents the
// certificate of its handshake. Connections busy with a long poll are
// closed once they fall idle, at the latest after grace.
func (c *Client) Rotate(grace time.Duration) {
	old := c.http.Swap(newHTTPClient(c.tlsConf))
	old.CloseIdleConnections()
	time.AfterFunc(grace, old.CloseIdleConnections)
}

// Do sends one request, trying each URL from the last one that worked.
// It decodes a 200 or 201 body into out (if non-nil) and returns the
// status. A 4xx is returned as *RefusedError without trying further URLs.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body, out any) (int, error) {
	var open opener
	if body != nil {
		payload, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		open = func() (io.ReadCloser, int64, string, error) {
			return io.NopCloser(bytes.NewReader(payload)), int64(len(payload)), "application/json", nil
		}
	}
	return c.send(ctx, method, path, query, open, out)
}

// Upload is Do with the file at file as the body, read again for each
// URL tried: a snapshot of gigabytes is never held in memory.
func (c *Client) Upload(ctx context.Context, method, path, file string, out any) (int, error) {
	return c.send(ctx, method, path, nil, func() (io.ReadCloser, int64, string, error) {
		f, err := os.Open(file)
		if err != nil {
			return nil, 0, "", err
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, "", err
		}
		return f, info.Size(), "application/octet-stream", nil
	}, out)
}

// opener opens a request's body: the body, its length and content type.
type opener func() (io.ReadCloser, int64, string, error)

func (c *Client) send(ctx context.Context, method, path string, query url.Values, open opener, out any) (int, error) {
	var status int
	err := c.tryEach(ctx, func(base string) error {
		var err error
		status, err = c.once(ctx, base, method, path, query, open, out)
		return err
	})
	var refused *RefusedError
	if err != nil && !errors.As(err, &refused) && ctx.Err() == nil {
		status = 0 // no controller answered
	}
	return status, err
}

// tryEach calls try with each controller URL, from the last one that
// worked, until one succeeds; a refusal (4xx), which another URL would
// repeat, or the end of ctx stops it.
func (c *Client) tryEach(ctx context.Context, try func(base string) error) error {
	if len(c.urls) == 0 {
		return errors.New("no controller URL to send the request to")
	}
	start := int(c.preferred.Load())
	var lastErr error
	for i := range c.urls {
		idx := (start + i) % len(c.urls)
		err := try(c.urls[idx])
		if err == nil {
			c.preferred.Store(int32(idx))
			return nil
		}
		if c.OnError != nil {
			c.OnError(Reason(err))
		}
		var refused *RefusedError
		if errors.As(err, &refused) || ctx.Err() != nil {
			c.preferred.Store(int32(idx))
			return err
		}
		lastErr = err
	}
	return lastErr
}

func (c *Client) once(ctx context.Context, base, method, path string, query url.Values, open opener, out any) (int, error) {
	u := strings.TrimSuffix(base, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return 0, fmt.Errorf("request %s: %w", u, err)
	}
	if open != nil {
		body, size, contentType, err := open()
		if err != nil {
			return 0, fmt.Errorf("request %s: %w", u, err)
		}
		req.Body, req.ContentLength = body, size
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Load().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read %s: %w", u, err)
	}
	if err := answerError(base, resp.StatusCode, data); err != nil {
		return resp.StatusCode, err
	}
	if (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated) && out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, &badResponseError{url: base, err: err}
		}
	}
	return resp.StatusCode, nil
}

// answerError is the error of an answer with status and body data: a
// *serverError for a 5xx, a *RefusedError for a 4xx, else nil.
func answerError(base string, status int, data []byte) error {
	switch {
	case status >= 500:
		return &serverError{url: base, status: status, body: errorMessage(data)}
	case status >= 400:
		var eb v1.ErrorBody
		_ = json.Unmarshal(data, &eb)
		if eb.Error.Code == "" {
			eb.Error = v1.Error{Code: "refused", Message: errorMessage(data)}
		}
		return &RefusedError{Status: status, Code: eb.Error.Code, Message: eb.Error.Message, Field: eb.Error.Field, URL: base}
	}
	return nil
}

// Download streams the body of a 200 answer to GET path into w, at most
// limit bytes, and returns its size. It tries each URL until one
// answers; once a body has begun, a failure is returned, not tried
// elsewhere, since w holds part of it.
func (c *Client) Download(ctx context.Context, path string, w io.Writer, limit int64) (int64, error) {
	var resp *http.Response
	var from string
	err := c.tryEach(ctx, func(base string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
		if err != nil {
			return err
		}
		r, err := c.http.Load().Do(req)
		if err != nil {
			return err
		}
		if r.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(io.LimitReader(r.Body, maxResponseBytes))
			r.Body.Close()
			if err := answerError(base, r.StatusCode, data); err != nil {
				return err
			}
			return &badResponseError{url: base, err: fmt.Errorf("answered %d, not 200", r.StatusCode)}
		}
		resp, from = r, base
		return nil
	})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil:
		return n, fmt.Errorf("%s%s after %d bytes: %w", from, path, n, err)
	case n > limit:
		return n, fmt.Errorf("%s%s: larger than %d bytes", from, path, limit)
	}
	return n, nil
}

func errorMessage(data []byte) string {
	var eb v1.ErrorBody
	if json.Unmarshal(data, &eb) == nil && eb.Error.Message != "" {
		return eb.Error.Message
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// FetchPinnedCA fetches the CA bundle from the controller without a trust
// anchor, accepting it only if the server's chain contains a certificate
// with the pinned public key and the bundle contains that same key.
func FetchPinnedCA(ctx context.Context, urls []string, pin string) ([]byte, error) {
	tlsConf := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the pin check below
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinnedChain(cs, pin)
		},
	}
	c := newClient(urls, tlsConf)
	defer c.Close()
	var lastErr error
	for _, base := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+v1.PathCA, nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.http.Load().Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, v1.MaxBootstrapBytes))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			lastErr = fmt.Errorf("%s%s: status %d: %v", base, v1.PathCA, resp.StatusCode, err)
			continue
		}
		certs, err := v1.ParseCertificatesPEM(data)
		if err != nil {
			return nil, fmt.Errorf("CA bundle from %s: %w", base, err)
		}
		if !v1.PinMatchesAny(pin, certs) {
			return nil, fmt.Errorf("CA bundle from %s does not match the pin %s", base, pin)
		}
		return data, nil
	}
	return nil, lastErr
}

func verifyPinnedChain(cs tls.ConnectionState, pin string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("server sent no certificate")
	}
	var anchor *x509.Certificate
	for _, c := range cs.PeerCertificates {
		if v1.CAPin(c) == pin {
			anchor = c
			break
		}
	}
	if anchor == nil {
		return fmt.Errorf("no certificate in the server's chain matches the pin %s", pin)
	}
	roots := x509.NewCertPool()
	roots.AddCert(anchor)
	if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: cs.ServerName}); err != nil {
		return err
	}
	return v1.VerifyController(cs)
}

// Backoff yields exponential delays with full jitter.
type Backoff struct {
	Base, Max time.Duration
	attempt   int
}

// Next returns the next delay: uniform in [0, min(Max, Base*2^n)].
func (b *Backoff) Next() time.Duration {
	ceiling := b.Base << min(b.attempt, 30)
	if ceiling > b.Max || ceiling <= 0 {
		ceiling = b.Max
	}
	b.attempt++
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

// Sleep waits d or until ctx is done.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
