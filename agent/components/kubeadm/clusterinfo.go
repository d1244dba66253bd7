package kubeadm

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/harmonykaas/harmony/agent/reconcile"
)

// clusterInfoPath is kube-public/cluster-info: the kubeconfig (CA and
// server) that kubeadm join discovers with a bootstrap token and then
// writes into the joining node's kubelet.conf.
const clusterInfoPath = "/api/v1/namespaces/kube-public/configmaps/cluster-info"

// ensureClusterInfo makes cluster-info name the API endpoint (VIP:port),
// creating it or mending its server. kubeadm's bootstrap-token phase
// writes it from the kubeconfig it is given, which here is the local
// one (the phases reach this master's apiserver, not the VIP): every
// node that joined would then reach the API on the first master's own
// address, and lose it while that master is replaced. So it runs right
// after that phase, and the BootstrapSigner re-signs the mended
// document. A node whose join reads it in the moment between (once per
// clusterPhasesRefresh) may still take the local address; running the
// phase through the VIP instead would need the VIP to serve before the
// first apiserver does.
func (c *Component) ensureClusterInfo(ctx context.Context, host *reconcile.Host, endpoint string) ([]string, error) {
	ca, err := os.ReadFile(host.Path(CACertFile))
	if err != nil {
		return nil, err
	}
	server := "https://" + endpoint
	want, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config",
		"clusters": []any{map[string]any{"name": "", "cluster": map[string]any{
			"server": server, "certificate-authority-data": base64.StdEncoding.EncodeToString(ca),
		}}},
	})
	if err != nil {
		return nil, err
	}
	api, err := c.adminAPI(host)
	if err != nil {
		return nil, err
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	code, err := api.Call(ctx, http.MethodGet, clusterInfoPath, "", nil, &cm, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return nil, fmt.Errorf("read cluster-info: %w", err)
	}
	if code == http.StatusNotFound {
		_, err := api.CreateIfAbsent(ctx, "/api/v1/namespaces/kube-public/configmaps", map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "cluster-info", "namespace": "kube-public"},
			"data":     map[string]any{"kubeconfig": string(want)},
		})
		if err != nil {
			return nil, fmt.Errorf("create cluster-info: %w", err)
		}
		return []string{"created cluster-info for " + server}, nil
	}
	if clusterInfoServer(cm.Data["kubeconfig"]) == server {
		return nil, nil
	}
	patch := map[string]any{"data": map[string]any{"kubeconfig": string(want)}}
	if _, err := api.Call(ctx, http.MethodPatch, clusterInfoPath, "application/merge-patch+json", patch, nil, http.StatusOK); err != nil {
		return nil, fmt.Errorf("point cluster-info at %s: %w", server, err)
	}
	return []string{"pointed cluster-info at " + server}, nil
}

// clusterInfoServer is the server of cluster-info's one cluster, or "".
func clusterInfoServer(kubeconfig string) string {
	var doc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	if yaml.Unmarshal([]byte(kubeconfig), &doc) != nil || len(doc.Clusters) != 1 {
		return ""
	}
	return doc.Clusters[0].Cluster.Server
}
