// Package kubeapi is the agent's small Kubernetes API client: the few REST
// calls its components make (cordon and evict, read a Node, create RBAC
// objects, ask health endpoints) with a credential kubeadm wrote, without client-go and its
// dependency tree.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/internal/kubeconfig"
)

// MaxFile bounds what is read of a kubeconfig, manifest or certificate
// another program wrote.
const MaxFile = 1 << 20

// requestTimeout bounds one call.
const requestTimeout = 30 * time.Second

// Dialer reaches the API server; nil dials directly. Tests use it to reach
// an apiserver inside a network namespace.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Client calls one cluster's API as one user.
type Client struct {
	server string
	http   *http.Client
}

// New is a client of server with tlsConf's CA and credential.
func New(server string, tlsConf *tls.Config, dial Dialer) *Client {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	return &Client{server: strings.TrimSuffix(server, "/"), http: &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{Proxy: nil, DialContext: dial, DisableKeepAlives: true,
			TLSClientConfig: tlsConf},
	}}
}

// FromHTTP is a client of server through h, which carries the TLS
// configuration.
func FromHTTP(server string, h *http.Client) *Client {
	return &Client{server: strings.TrimSuffix(server, "/"), http: h}
}

// At is the same client, credential and trust, for another address of
// the same API: a master's kubeconfig names its own apiserver, which a
// hand-over stops, where the VIP still answers.
func (c *Client) At(server string) *Client {
	return &Client{server: strings.TrimSuffix(server, "/"), http: c.http}
}

// Open is a client with the kubeconfig at path on the host (kubelet.conf,
// admin.conf): its first cluster and user. A client certificate in a file
// (the kubelet's, which it rotates) is read under the host's root.
func Open(host *reconcile.Host, path string, dial Dialer) (*Client, error) {
	data, err := ReadBounded(host.Path(path))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	kc, err := kubeconfig.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	user := &kc.Users[0].User
	if len(user.CertData) == 0 && user.CertFile != "" {
		if user.CertData, err = ReadBounded(host.Path(user.CertFile)); err != nil {
			return nil, fmt.Errorf("%s: client certificate: %w", path, err)
		}
	}
	if len(user.KeyData) == 0 && user.KeyFile != "" {
		if user.KeyData, err = ReadBounded(host.Path(user.KeyFile)); err != nil {
			return nil, fmt.Errorf("%s: client key: %w", path, err)
		}
	}
	tlsConf, err := kc.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return New(kc.Clusters[0].Cluster.Server, tlsConf, dial), nil
}

// Call sends one request with body as JSON; out, when not nil, gets a 2xx
// answer's JSON. It returns the status code, and an error for a status not
// in ok.
func (c *Client) Call(ctx context.Context, method, path, contentType string, body, out any, ok ...int) (int, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, r)
	if err != nil {
		return 0, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if !slices.Contains(ok, resp.StatusCode) {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, Message(data))
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// CreateIfAbsent creates obj (with kind and metadata.name) in the
// collection at path unless an object of its name exists, which is left
// as it is. created reports a new object.
func (c *Client) CreateIfAbsent(ctx context.Context, path string, obj map[string]any) (created bool, err error) {
	code, err := c.Call(ctx, http.MethodPost, path, "application/json", obj, nil, http.StatusCreated, http.StatusConflict)
	if err != nil {
		kind, _ := obj["kind"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		return false, fmt.Errorf("create %s %s: %w", kind, name, err)
	}
	return code == http.StatusCreated, nil
}

// maxHealthAnswer bounds what is read of a health endpoint's answer.
const maxHealthAnswer = 64 << 10

// HealthCheck GETs a Kubernetes health endpoint (an apiserver's /readyz,
// a kubelet's or kube-proxy's /healthz) within timeout: nil for 200, else
// an error with the failing checks it lists.
func HealthCheck(ctx context.Context, client *http.Client, endpoint string, timeout time.Duration) error {
	name := endpoint
	if u, err := url.Parse(endpoint); err == nil {
		name = u.Path
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
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
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxHealthAnswer))
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

// Message is a Status answer's message, else the answer, bounded.
func Message(data []byte) string {
	var status struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &status) == nil && status.Message != "" {
		return status.Message
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	return msg
}

// ReadBounded reads a file another program wrote, refusing one larger
// than MaxFile.
func ReadBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxFile)
	}
	return data, nil
}

// Object is an API object and the collection it is created in.
type Object struct {
	Collection string
	Body       map[string]any
}

// EnsureAll creates, in order, the objects that do not exist yet; existing
// ones are left as they are. actions name the objects created.
func (c *Client) EnsureAll(ctx context.Context, objs []Object) (actions []string, err error) {
	for _, o := range objs {
		created, err := c.CreateIfAbsent(ctx, o.Collection, o.Body)
		if err != nil {
			return actions, err
		}
		if created {
			meta, _ := o.Body["metadata"].(map[string]any)
			actions = append(actions, fmt.Sprintf("created %s %s", o.Body["kind"], meta["name"]))
		}
	}
	return actions, nil
}

// The RBAC collections, where the agent grants what node daemons need.
const (
	ClusterRoles        = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
	ClusterRoleBindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
)

// GroupBinding is a ClusterRoleBinding of the ClusterRole role to the
// group.
func GroupBinding(name, role, group string) Object {
	return Object{Collection: ClusterRoleBindings, Body: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": name},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}},
	}}
}

// NodesGroup is the group of every kubelet's credential.
const NodesGroup = "system:nodes"
