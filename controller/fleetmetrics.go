package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller/cluster"
	"github.com/harmonykaas/harmony/controller/store"
)

// fleetCollector exports what the controller knows of every cluster and
// node, read from the store at each scrape: Prometheus sees a failed
// cluster, a node gone silent or a certificate left expired also where
// it cannot reach the nodes themselves.
type fleetCollector struct {
	clusters *cluster.Service
	store    *store.Store

	clusterPhase, clusterCondition            *prometheus.Desc
	nodePhase, nodeLastReport, nodeCertExpiry *prometheus.Desc
}

func newFleetCollector(clusters *cluster.Service, st *store.Store) *fleetCollector {
	return &fleetCollector{clusters: clusters, store: st,
		clusterPhase: prometheus.NewDesc("harmony_controller_cluster_phase",
			"1 for each cluster's phase (Provisioning, Upgrading, Running, Deleting or Failed).", []string{"cluster", "phase"}, nil),
		clusterCondition: prometheus.NewDesc("harmony_controller_cluster_condition",
			"A cluster's condition: 1 if True, 0 if False; absent otherwise.", []string{"cluster", "condition"}, nil),
		nodePhase: prometheus.NewDesc("harmony_controller_node_phase",
			"1 for each cluster node's phase, as `harmonyctl cluster get` shows it (Unresponsive: its agent has not reported for "+v1.StatusStaleAfter.String()+").",
			[]string{"cluster", "node", "role", "phase"}, nil),
		nodeLastReport: prometheus.NewDesc("harmony_controller_node_last_report_timestamp_seconds",
			"When a cluster node's agent last reported its status (Unix time); absent before its first report.", []string{"cluster", "node"}, nil),
		nodeCertExpiry: prometheus.NewDesc("harmony_controller_node_certificate_expiry_timestamp_seconds",
			"NotAfter of each node's newest certificate, from enrollment or renewal (Unix time); absent before it enrolls.", []string{"cluster", "node"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (f *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{f.clusterPhase, f.clusterCondition, f.nodePhase, f.nodeLastReport, f.nodeCertExpiry} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A store that cannot be read
// fails the scrape, rather than showing an empty fleet.
func (f *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	clusters, err := f.clusters.List()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(f.clusterPhase, err)
		return
	}
	for _, c := range clusters {
		name := c.Spec.Name
		ch <- prometheus.MustNewConstMetric(f.clusterPhase, prometheus.GaugeValue, 1, name, c.Status.Phase)
		seen := map[string]bool{} // one series each, or the scrape fails
		for _, cond := range c.Status.Conditions {
			if seen[cond.Type] {
				continue
			}
			seen[cond.Type] = true
			switch cond.Status {
			case "True":
				ch <- prometheus.MustNewConstMetric(f.clusterCondition, prometheus.GaugeValue, 1, name, cond.Type)
			case "False":
				ch <- prometheus.MustNewConstMetric(f.clusterCondition, prometheus.GaugeValue, 0, name, cond.Type)
			}
		}
		for _, n := range c.Status.Nodes {
			ch <- prometheus.MustNewConstMetric(f.nodePhase, prometheus.GaugeValue, 1, name, n.Name, string(n.Role), n.Phase)
			if n.LastReport != nil {
				ch <- prometheus.MustNewConstMetric(f.nodeLastReport, prometheus.GaugeValue, float64(n.LastReport.Unix()), name, n.Name)
			}
		}
	}
	nodes, err := f.store.Nodes()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(f.nodeCertExpiry, err)
		return
	}
	for _, n := range nodes {
		if !n.CertNotAfter.IsZero() {
			ch <- prometheus.MustNewConstMetric(f.nodeCertExpiry, prometheus.GaugeValue, float64(n.CertNotAfter.Unix()), n.Cluster, n.Name)
		}
	}
}
