package flannel

import (
	"context"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
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

// rbacObjects are the ClusterRole and its binding.
func rbacObjects() []kubeapi.Object {
	return []kubeapi.Object{
		{Collection: kubeapi.ClusterRoles, Body: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
			"metadata": map[string]any{"name": nodesReader},
			"rules":    []any{map[string]any{"apiGroups": []string{""}, "resources": []string{"nodes"}, "verbs": []string{"get", "list", "watch"}}},
		}},
		kubeapi.GroupBinding(nodesReader, nodesReader, kubeapi.NodesGroup),
	}
}

// ensureRBAC creates the objects that do not exist yet, as the cluster
// admin of the kubeconfig at path on the host (a master's admin.conf); an
// existing object is left as it is.
func ensureRBAC(ctx context.Context, host *reconcile.Host, path string) ([]string, error) {
	client, err := kubeapi.Open(host, path, nil)
	if err != nil {
		return nil, err
	}
	return client.EnsureAll(ctx, rbacObjects())
}
