package controller

import (
	"net"
	"net/http"
	"strconv"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// handleMetricsTargets answers Prometheus's HTTP service discovery with
// every node's agent, so that scraping follows the fleet: a node a scale,
// an upgrade or a replacement makes is scraped from its first boot, and
// a removed one is dropped. A node's target is its first address, which
// its certificate names, on the agent's metrics port.
func (c *Controller) handleMetricsTargets(w http.ResponseWriter, r *http.Request, _ principal) *apiError {
	nodes, err := c.store.Nodes()
	if err != nil {
		return storeError(err, "nodes")
	}
	groups := []v1.MetricsTargetGroup{}
	for _, n := range nodes {
		if len(n.IPs) == 0 {
			continue
		}
		labels := map[string]string{v1.MetricsLabelNode: n.Name, v1.MetricsLabelRole: string(n.Role)}
		if n.Cluster != "" {
			labels[v1.MetricsLabelCluster] = n.Cluster
		}
		groups = append(groups, v1.MetricsTargetGroup{
			Targets: []string{net.JoinHostPort(n.IPs[0], strconv.Itoa(v1.AgentMetricsPort))},
			Labels:  labels,
		})
	}
	writeJSON(w, http.StatusOK, groups)
	return nil
}
