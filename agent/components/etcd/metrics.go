package etcd

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds what the last pass saw, for Collect. Values are the last
// pass's, not asked at scrape time: a scrape never waits on etcd.
type metrics struct {
	info, leader, learner, hasLeader *prometheus.Desc

	mu      sync.Mutex
	enabled bool
	known   bool // the local member answered its status
	id      uint64
	name    string
	isLead  bool
	isLearn bool
	hasLead bool
}

func newMetrics() *metrics {
	return &metrics{
		info: prometheus.NewDesc("harmony_agent_etcd_member_info",
			"The local etcd member, by ID (hex, as etcdctl prints it) and name; always 1.",
			[]string{"member_id", "name"}, nil),
		leader: prometheus.NewDesc("harmony_agent_etcd_is_leader",
			"1 if the local etcd member is the cluster's leader.", nil, nil),
		learner: prometheus.NewDesc("harmony_agent_etcd_is_learner",
			"1 if the local etcd member is a learner, not yet promoted to a voting member.", nil, nil),
		hasLeader: prometheus.NewDesc("harmony_agent_etcd_has_leader",
			"1 if the local etcd member knows a leader; 0 also when it does not answer.", nil, nil),
	}
}

func (m *metrics) set(o observation, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.enabled = true
	m.known = o.statusErr == nil
	m.id, m.name = o.status.MemberID, name
	m.isLead = m.known && o.status.Leader != 0 && o.status.Leader == o.status.MemberID
	m.isLearn = m.known && o.status.IsLearner
	m.hasLead = m.known && o.status.Leader != 0
}

func (m *metrics) disable() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.enabled, m.known, m.id, m.name = false, false, 0, ""
	m.isLead, m.isLearn, m.hasLead = false, false, false
}

// Describe implements prometheus.Collector.
func (c *Component) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.metrics.info, c.metrics.leader, c.metrics.learner, c.metrics.hasLeader} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A node without a member (a
// worker) exports nothing.
func (c *Component) Collect(ch chan<- prometheus.Metric) {
	m := c.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.enabled {
		return
	}
	if m.known {
		ch <- prometheus.MustNewConstMetric(m.info, prometheus.GaugeValue, 1, fmt.Sprintf("%x", m.id), m.name)
	}
	ch <- prometheus.MustNewConstMetric(m.leader, prometheus.GaugeValue, boolValue(m.isLead))
	ch <- prometheus.MustNewConstMetric(m.learner, prometheus.GaugeValue, boolValue(m.isLearn))
	ch <- prometheus.MustNewConstMetric(m.hasLeader, prometheus.GaugeValue, boolValue(m.hasLead))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MemberID is the local member's ID as etcdctl prints it (hex), or "" when
// this node runs no member or it has not answered: the agent reports it
// in its status.
func (c *Component) MemberID() string {
	m := c.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.enabled || !m.known || m.id == 0 {
		return ""
	}
	return fmt.Sprintf("%x", m.id)
}
