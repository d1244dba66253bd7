package kubeadm

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/harmonykaas/harmony/agent/kubeapi"
	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// nodeGoneAfter is how long a Node that is no longer the cluster's must
// have been silent (its kubelet's last heartbeat) before it is deleted:
// longer than the node lifecycle's grace, so that only a machine that is
// off or gone qualifies.
const nodeGoneAfter = 2 * time.Minute

// listedNode is what pruning reads of a Node.
type listedNode struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Status struct {
		Conditions []struct {
			Type              string    `json:"type"`
			Status            string    `json:"status"`
			LastHeartbeatTime time.Time `json:"lastHeartbeatTime"`
		} `json:"conditions"`
	} `json:"status"`
}

// pruneNodes deletes, on the first master, the Nodes of machines the
// cluster no longer has: a Node whose name is no peer of the role, not
// Ready, and silent for nodeGoneAfter. A removed node cannot delete its own
// Node (the Node authorizer does not let a kubelet), and a worker replaced
// by an upgrade leaves its Node behind; without this they would stay in
// the API, cordoned and NotReady. A node still leaving is no peer of the
// others either, but its kubelet still reports, so its Node stays until it
// has been off for a while.
func (c *Component) pruneNodes(ctx context.Context, host *reconcile.Host, role *v1.Role, now time.Time) ([]string, error) {
	api, err := c.adminAPI(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var list struct {
		Items []listedNode `json:"items"`
	}
	if _, err := api.Call(ctx, http.MethodGet, "/api/v1/nodes", "", nil, &list, http.StatusOK); err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	peers := map[string]bool{}
	for _, p := range role.Peers {
		peers[p.Name] = true
	}
	var actions []string
	for _, n := range list.Items {
		name := n.Metadata.Name
		if peers[name] || !silentSince(n, now.Add(-nodeGoneAfter)) {
			continue
		}
		if _, err := api.Call(ctx, http.MethodDelete, "/api/v1/nodes/"+url.PathEscape(name), "", nil, nil, http.StatusOK, http.StatusNotFound); err != nil {
			return actions, fmt.Errorf("delete Node %s: %w", name, err)
		}
		logger(host).Info("deleted the Node of a machine the cluster no longer has", "node", name)
		actions = append(actions, "deleted Node "+name+": no longer in the cluster")
	}
	return actions, nil
}

// silentSince reports whether the Node is not Ready and its kubelet has
// not reported since before.
func silentSince(n listedNode, before time.Time) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status != "True" && c.LastHeartbeatTime.Before(before)
		}
	}
	return true // never reported
}

// adminAPI reaches this master's apiserver with the super-admin
// credential, which only the first master has.
func (c *Component) adminAPI(host *reconcile.Host) (*kubeapi.Client, error) {
	return c.kubeAPI(host, SuperAdminKubeconfig)
}

// kubeAPI reaches this master's apiserver with the client certificate of
// the kubeconfig at node path kubeconfig.
func (c *Component) kubeAPI(host *reconcile.Host, kubeconfig string) (*kubeapi.Client, error) {
	kc, err := readKubeconfig(host.Path(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", kubeconfig, err)
	}
	cert, err := kc.keyPair()
	if err != nil {
		return nil, fmt.Errorf("%s client certificate: %w", kubeconfig, err)
	}
	client, err := c.apiClient(host, &cert)
	if err != nil {
		return nil, err
	}
	return kubeapi.FromHTTP(localAPI, client), nil
}
