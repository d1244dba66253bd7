package v1

// AgentMetricsPort is where harmony-agent serves /metrics over mutual
// TLS unless told otherwise; the controller's service discovery points
// Prometheus at it.
const AgentMetricsPort = 9101

// Labels the controller's service discovery puts on every agent's target.
const (
	MetricsLabelCluster = "cluster"
	MetricsLabelNode    = "node"
	MetricsLabelRole    = "role"
)

// MetricsTargetGroup is one entry of Prometheus's HTTP service discovery
// (GET PathMetricsTargets answers a list of them): the targets to scrape
// and the labels they get.
type MetricsTargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}
