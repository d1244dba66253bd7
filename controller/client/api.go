package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// One typed method per admin API call. Do stays for what has no method.

// Health reports whether the controller answers its health check.
func (c *Client) Health(ctx context.Context) error {
	return c.Do(ctx, "GET", v1.PathHealthz, nil, nil)
}

// Nodes lists the node records with their enrollment and status.
func (c *Client) Nodes(ctx context.Context) ([]v1.Node, error) {
	var list v1.NodeList
	if err := c.Do(ctx, "GET", v1.PathNodes, nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Node returns one node.
func (c *Client) Node(ctx context.Context, name string) (*v1.Node, error) {
	var n v1.Node
	if err := c.Do(ctx, "GET", NodePath(name, ""), nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// AddNode records a node and returns it with its one-time bootstrap.
func (c *Client) AddNode(ctx context.Context, spec v1.NodeSpec) (*v1.NodeWithBootstrap, error) {
	var res v1.NodeWithBootstrap
	if err := c.Do(ctx, "POST", v1.PathNodes, spec, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DeleteNode removes a node record; its certificate stops working.
func (c *Client) DeleteNode(ctx context.Context, name string) error {
	return c.Do(ctx, "DELETE", NodePath(name, ""), nil, nil)
}

// NewToken issues a node a new bootstrap, revoking its unused tokens.
func (c *Client) NewToken(ctx context.Context, name string, req v1.TokenRequest) (*v1.NodeWithBootstrap, error) {
	var res v1.NodeWithBootstrap
	if err := c.Do(ctx, "POST", NodePath(name, "/token"), req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Role returns a node's role.
func (c *Client) Role(ctx context.Context, name string) (*v1.Role, error) {
	var r v1.Role
	if err := c.Do(ctx, "GET", NodePath(name, "/role"), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// SetRole replaces the role of node name and returns it with its new
// revision. The name is not taken from role.NodeName so that the
// controller can refuse a document written for another node.
func (c *Client) SetRole(ctx context.Context, name string, role *v1.Role) (*v1.Role, error) {
	var r v1.Role
	if err := c.Do(ctx, "PUT", NodePath(name, "/role"), role, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// SetRoles replaces several roles in one transaction, as a cluster-wide
// change needs, and returns the new role revision.
func (c *Client) SetRoles(ctx context.Context, roles []v1.Role) (int64, error) {
	// The answer is {"revision": N} for several roles and the role itself
	// for one; both carry "revision".
	var answer struct {
		Revision int64 `json:"revision"`
	}
	if err := c.Do(ctx, "PUT", v1.PathRoles, v1.RoleList{Items: roles}, &answer); err != nil {
		return 0, err
	}
	return answer.Revision, nil
}

// Providers lists the vSphere providers, passwords redacted.
func (c *Client) Providers(ctx context.Context) ([]v1.Provider, error) {
	var list v1.ProviderList
	if err := c.Do(ctx, "GET", v1.PathProviders, nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Provider returns one provider, its password redacted.
func (c *Client) Provider(ctx context.Context, name string) (*v1.Provider, error) {
	var p v1.Provider
	if err := c.Do(ctx, "GET", v1.PathProviders+"/"+url.PathEscape(name), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ApplyProvider creates or updates a provider after the controller has
// logged in to its vCenter.
func (c *Client) ApplyProvider(ctx context.Context, p *v1.Provider) (*v1.Provider, error) {
	var applied v1.Provider
	if err := c.Do(ctx, "PUT", v1.PathProviders+"/"+url.PathEscape(p.Name), p, &applied); err != nil {
		return nil, err
	}
	return &applied, nil
}

// DeleteProvider removes a provider no cluster uses.
func (c *Client) DeleteProvider(ctx context.Context, name string) error {
	return c.Do(ctx, "DELETE", v1.PathProviders+"/"+url.PathEscape(name), nil, nil)
}

// Images lists a provider's images; an empty provider means every
// provider's.
func (c *Client) Images(ctx context.Context, provider string) ([]v1.Image, error) {
	var list v1.ImageList
	if err := c.Do(ctx, "GET", v1.PathImages+"?provider="+url.QueryEscape(provider), nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// ImportImage uploads an OVA of size bytes into a provider. It returns the
// import operation, or the image when this very file is imported already.
func (c *Client) ImportImage(ctx context.Context, provider string, ova io.Reader, size int64) (*v1.Operation, *v1.Image, error) {
	var raw json.RawMessage
	status, err := c.Upload(ctx, v1.PathImages+"?provider="+url.QueryEscape(provider), ova, size, &raw)
	if err != nil {
		return nil, nil, err
	}
	if status == http.StatusOK {
		var img v1.Image
		if err := json.Unmarshal(raw, &img); err != nil {
			return nil, nil, fmt.Errorf("decode image: %w", err)
		}
		return nil, &img, nil
	}
	var op v1.Operation
	if err := json.Unmarshal(raw, &op); err != nil {
		return nil, nil, fmt.Errorf("decode operation: %w", err)
	}
	return &op, nil, nil
}

func clusterPath(name, suffix string) string {
	return v1.PathClusters + "/" + url.PathEscape(name) + suffix
}

// Clusters lists the clusters (from the controller's store).
func (c *Client) Clusters(ctx context.Context) ([]v1.Cluster, error) {
	var list v1.ClusterList
	if err := c.Do(ctx, "GET", v1.PathClusters, nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Cluster returns a cluster with its nodes, as vCenter and the agents
// report them, and its newest events.
func (c *Client) Cluster(ctx context.Context, name string) (*v1.Cluster, error) {
	var cl v1.Cluster
	if err := c.Do(ctx, "GET", clusterPath(name, ""), nil, &cl); err != nil {
		return nil, err
	}
	return &cl, nil
}

// CreateCluster starts creating a cluster.
func (c *Client) CreateCluster(ctx context.Context, spec *v1.ClusterSpec) (*v1.Operation, error) {
	return c.doOperation(ctx, "POST", v1.PathClusters, spec)
}

// ScaleCluster starts changing a cluster's counts of masters or workers.
func (c *Client) ScaleCluster(ctx context.Context, name string, req v1.ScaleRequest) (*v1.Operation, error) {
	return c.doOperation(ctx, "POST", clusterPath(name, "/scale"), req)
}

// UpgradeCluster starts an upgrade by reimage, or with req.Abort stops
// the running one.
func (c *Client) UpgradeCluster(ctx context.Context, name string, req v1.UpgradeRequest) (*v1.Operation, error) {
	return c.doOperation(ctx, "POST", clusterPath(name, "/upgrade"), req)
}

// SnapshotCluster asks the cluster's masters for an etcd snapshot now.
func (c *Client) SnapshotCluster(ctx context.Context, name string) (*v1.Operation, error) {
	return c.doOperation(ctx, "POST", clusterPath(name, "/etcd-snapshot"), nil)
}

// RestoreCluster starts an etcd restore from a master's snapshot.
func (c *Client) RestoreCluster(ctx context.Context, name string, req v1.RestoreRequest) (*v1.Operation, error) {
	return c.doOperation(ctx, "POST", clusterPath(name, "/restore"), req)
}

// RemoveClusterNode starts removing one worker; keepVM keeps its VM
// powered off.
func (c *Client) RemoveClusterNode(ctx context.Context, name, node string, keepVM bool) (*v1.Operation, error) {
	path := clusterPath(name, "/nodes/"+url.PathEscape(node))
	if keepVM {
		path += "?keepVM=true"
	}
	return c.doOperation(ctx, "DELETE", path, nil)
}

// ReplaceClusterNode starts replacing a master's VM by a new one.
func (c *Client) ReplaceClusterNode(ctx context.Context, name, node string, req v1.ReplaceNodeRequest) (*v1.Operation, error) {
	return c.doOperation(ctx, "POST", clusterPath(name, "/nodes/"+url.PathEscape(node)+"/replace"), req)
}

// DeleteCluster starts deleting a cluster; purge deletes its data disks
// too.
func (c *Client) DeleteCluster(ctx context.Context, name string, purge bool) (*v1.Operation, error) {
	path := clusterPath(name, "")
	if purge {
		path += "?purge=true"
	}
	return c.doOperation(ctx, "DELETE", path, nil)
}

// Leftovers lists what clusters deleted without purge left.
func (c *Client) Leftovers(ctx context.Context) ([]v1.ClusterLeftovers, error) {
	var list v1.ClusterLeftoversList
	if err := c.Do(ctx, "GET", v1.PathLeftovers, nil, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// PurgeLeftovers removes a deleted cluster's data disks and snapshot
// copies; id is v1.ClusterInstance of its name and UID.
func (c *Client) PurgeLeftovers(ctx context.Context, id string) (*v1.ClusterLeftovers, error) {
	var gone v1.ClusterLeftovers
	if err := c.Do(ctx, "DELETE", v1.PathLeftovers+"/"+url.PathEscape(id), nil, &gone); err != nil {
		return nil, err
	}
	return &gone, nil
}

// RetryCluster restarts the workflow of a cluster's failed nodes.
func (c *Client) RetryCluster(ctx context.Context, name string) (*v1.Operation, error) {
	return c.doOperation(ctx, "POST", clusterPath(name, "/retry"), nil)
}

// Kubeconfig issues a cluster-admin kubeconfig; a zero lifetime takes
// the controller's default.
func (c *Client) Kubeconfig(ctx context.Context, cluster string, lifetime time.Duration) (*v1.Kubeconfig, error) {
	var req v1.KubeconfigRequest
	if lifetime > 0 {
		req.Lifetime = lifetime.String()
	}
	var kc v1.Kubeconfig
	if err := c.Do(ctx, "POST", clusterPath(cluster, "/kubeconfig"), req, &kc); err != nil {
		return nil, err
	}
	return &kc, nil
}

// UserKubeconfig is the caller's own kubeconfig for a cluster: its
// credential comes from harmonyctl's exec plugin, under the caller's grant.
func (c *Client) UserKubeconfig(ctx context.Context, cluster string) (*v1.Kubeconfig, error) {
	var kc v1.Kubeconfig
	if err := c.Do(ctx, "GET", clusterPath(cluster, "/kubeconfig"), nil, &kc); err != nil {
		return nil, err
	}
	return &kc, nil
}

// doOperation sends a request that answers with an operation.
func (c *Client) doOperation(ctx context.Context, method, path string, body any) (*v1.Operation, error) {
	var op v1.Operation
	if err := c.Do(ctx, method, path, body, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// Operation returns an operation with its progress.
func (c *Client) Operation(ctx context.Context, id string) (*v1.Operation, error) {
	return c.doOperation(ctx, "GET", v1.PathOperations+"/"+url.PathEscape(id), nil)
}

// WatchOperation waits up to timeout (at most the controller's bound; zero
// takes the controller's default) for an event after revision, or the
// operation's end, and returns the operation then.
func (c *Client) WatchOperation(ctx context.Context, id string, revision int64, timeout time.Duration) (*v1.Operation, error) {
	var op v1.Operation
	path := fmt.Sprintf("%s/%s?watch=true&revision=%d", v1.PathOperations, url.PathEscape(id), revision)
	if timeout > 0 {
		path += "&timeout=" + timeout.String()
	}
	if err := c.Do(ctx, "GET", path, nil, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// WaitOperation follows an operation until it ends or ctx does, calling
// progress (if set) with each new state. A controller that stops
// answering or says it is shutting down (restarted, or failed over) is
// asked again for up to waitUnreachable: the operation goes on without
// it, and a watch is cheap to resume from its revision.
func (c *Client) WaitOperation(ctx context.Context, id string, progress func(*v1.Operation)) (*v1.Operation, error) {
	var revision int64
	var unreachableSince time.Time
	for {
		op, err := c.WatchOperation(ctx, id, revision, 30*time.Second)
		var apiErr *APIError
		switch {
		case err == nil:
			unreachableSince = time.Time{}
		case ctx.Err() != nil || errors.As(err, &apiErr) && apiErr.Body.Code != v1.CodeUnavailable || untrusted(err):
			return nil, err
		default:
			if unreachableSince.IsZero() {
				unreachableSince = time.Now()
			}
			if time.Since(unreachableSince) > waitUnreachable {
				return nil, fmt.Errorf("the controller has not answered for %s: %w", waitUnreachable, err)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(waitRetry):
			}
			continue
		}
		if progress != nil {
			progress(op)
		}
		if op.Done() {
			return op, nil
		}
		revision = op.Revision
	}
}

// untrusted reports whether err is a TLS failure that asking again does
// not mend: this client does not trust the server's certificate, or the
// server refused this client's.
func untrusted(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		op       *net.OpError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.Is(err, v1.ErrNotController) ||
		// An alert from the server: crypto/tls reports it this way only.
		errors.As(err, &op) && op.Op == "remote error"
}

// How long, and how often, WaitOperation asks a controller that does not
// answer.
const (
	waitUnreachable = 2 * time.Minute
	waitRetry       = time.Second
)
