package kubeadm

import (
	"path"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harmonykaas/harmony/agent/reconcile"
)

// metricsState is what the last pass observed, for scrapes; its own lock,
// so that a scrape never waits for a pass running kubeadm.
type metricsState struct {
	certExpiry    *prometheus.Desc
	apiReady      *prometheus.Desc
	clusterPhases *prometheus.Desc
	servingCSRs   *prometheus.Desc

	mu sync.Mutex
	// expiry of each leaf certificate kubeadm (or the agent) made on this
	// master, by name.
	expiry map[string]time.Time
	// ready is 1 or 0 for a master, -1 when there is nothing to report.
	ready       float64
	clusterDone time.Time
	// servingCSRs counts the kubelet serving certificate requests this
	// master decided, by decision ("approved", "denied").
	servingDecisions map[string]float64
}

func newMetricsState() metricsState {
	return metricsState{
		certExpiry: prometheus.NewDesc("harmony_agent_kubernetes_certificate_expiry_timestamp_seconds",
			"When a Kubernetes leaf certificate on this master expires (Unix time): the PKI files, and the client certificates in kubeadm's kubeconfigs.",
			[]string{"cert"}, nil),
		apiReady: prometheus.NewDesc("harmony_agent_kubernetes_apiserver_ready",
			"1 if this master's kube-apiserver answered /readyz with 200 on the last pass, 0 if not.", nil, nil),
		clusterPhases: prometheus.NewDesc("harmony_agent_kubeadm_cluster_phases_timestamp_seconds",
			"When the first master last completed kubeadm's cluster-wide phases (Unix time).", nil, nil),
		servingCSRs: prometheus.NewDesc("harmony_agent_kubelet_serving_certificate_requests_total",
			"Kubelet serving certificate requests this master's agent decided since it started, by decision (approved, denied).",
			[]string{"decision"}, nil),
		ready:            -1,
		servingDecisions: map[string]float64{"approved": 0, "denied": 0},
	}
}

// Describe implements prometheus.Collector.
func (c *Component) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.metrics.certExpiry
	ch <- c.metrics.apiReady
	ch <- c.metrics.clusterPhases
	ch <- c.metrics.servingCSRs
}

// Collect implements prometheus.Collector.
func (c *Component) Collect(ch chan<- prometheus.Metric) {
	m := &c.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, t := range m.expiry {
		ch <- prometheus.MustNewConstMetric(m.certExpiry, prometheus.GaugeValue, float64(t.Unix()), name)
	}
	if m.ready >= 0 {
		ch <- prometheus.MustNewConstMetric(m.apiReady, prometheus.GaugeValue, m.ready)
	}
	if !m.clusterDone.IsZero() {
		ch <- prometheus.MustNewConstMetric(m.clusterPhases, prometheus.GaugeValue, float64(m.clusterDone.Unix()))
	}
	if m.ready >= 0 { // a master
		for decision, n := range m.servingDecisions {
			ch <- prometheus.MustNewConstMetric(m.servingCSRs, prometheus.CounterValue, n, decision)
		}
	}
}

// countServingRequest counts one decision of a kubelet serving
// certificate request (the condition type, Approved or Denied).
func (m *metricsState) countServingRequest(condition string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.servingDecisions[strings.ToLower(condition)]++
}

// snapshot reads the expiry of every leaf certificate on the master.
func (m *metricsState) snapshot(host *reconcile.Host, kubeconfigs []string) {
	expiry := map[string]time.Time{}
	for _, leaf := range leafCerts {
		if cert, err := readCert(host.Path(path.Join(PKIDir, leaf.name+".crt"))); err == nil {
			expiry[leaf.name] = cert.NotAfter
		}
	}
	if cert, err := readCert(host.Path(EtcdClientCertFile)); err == nil {
		expiry["apiserver-etcd-client"] = cert.NotAfter
	}
	for _, k := range kubeconfigs {
		if kc, err := readKubeconfig(host.Path(path.Join(KubernetesDir, k))); err == nil {
			if cert := kc.clientCert(); cert != nil {
				expiry[k] = cert.NotAfter
			}
		}
	}
	m.mu.Lock()
	m.expiry = expiry
	m.mu.Unlock()
}

func (m *metricsState) setReady(ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready = 0
	if ok {
		m.ready = 1
	}
}

func (m *metricsState) setClusterPhases(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clusterDone = t
}

// clear drops everything: the node is no master.
func (m *metricsState) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expiry, m.ready, m.clusterDone = nil, -1, time.Time{}
}
