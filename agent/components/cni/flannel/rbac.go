package flannel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/internal/kubeconfig"
)

// nodesReader names the ClusterRole and the binding that let every node
// read every Node. flanneld runs as its node (the kubelet's credential)
// and must list all Nodes to learn each one's VXLAN endpoint and pod
// subnet; since Kubernetes 1.32 the Node authorizer lets a node read its
// own Node only. This gives every kubelet credential what kube-flannel's
// DaemonSet gives its service account on every node, read access to
// Nodes, and nothing more: patching is still its own Node's status alone
// (the Node authorizer and NodeRestriction).
const nodesReader = "harmony:flannel:nodes-reader"

// rbacObjects are the ClusterRole and ClusterRoleBinding, by the API path
// they are created at.
func rbacObjects() []struct {
	path string
	body map[string]any
} {
	return []struct {
		path string
		body map[string]any
	}{
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
			"metadata": map[string]any{"name": nodesReader},
			"rules":    []any{map[string]any{"apiGroups": []string{""}, "resources": []string{"nodes"}, "verbs": []string{"get", "list", "watch"}}},
		}},
		{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": nodesReader},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": nodesReader},
			"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}},
		}},
	}
}

// ensureRBAC creates the objects that do not exist yet, as the cluster
// admin of the kubeconfig at path (a master's admin.conf); an existing
// object is left as it is.
func ensureRBAC(ctx context.Context, path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	kc, err := kubeconfig.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tlsConf, err := kc.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	server := strings.TrimSuffix(kc.Clusters[0].Cluster.Server, "/")
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	defer client.CloseIdleConnections()
	var actions []string
	for _, o := range rbacObjects() {
		body, err := json.Marshal(o.body)
		if err != nil {
			return actions, err
		}
		kind := o.body["kind"].(string)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, server+o.path, bytes.NewReader(body))
		if err != nil {
			return actions, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return actions, fmt.Errorf("create %s %s: %w", kind, nodesReader, err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated:
			actions = append(actions, "created "+kind+" "+nodesReader)
		case http.StatusConflict:
		default:
			return actions, fmt.Errorf("create %s %s: %s: %s", kind, nodesReader, resp.Status, strings.TrimSpace(string(msg)))
		}
	}
	return actions, nil
}
