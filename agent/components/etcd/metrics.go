package etcd

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// metrics holds what the last pass saw, for Collect. Values are the last
// pass's, not asked at scrape time: a scrape never waits on etcd.
type metrics struct {
	info, leader, learner, hasLeader          *prometheus.Desc
	snapshotNewest, snapshotCount, snapFailed *prometheus.Desc
	copyFailures, snapshotInterval            *prometheus.Desc

	mu      sync.Mutex
	enabled bool
	known   bool // the local member answered its status
	id      uint64
	name    string
	isLead  bool
	isLearn bool
	hasLead bool
	// interval is the snapshot schedule's; 0 when snapshots are off.
	interval time.Duration
	// snaps is what the snapshot directory held after the last pass that
	// looked; snapFailures counts failed snapshots since the agent started.
	snaps        snapshotState
	snapsKnown   bool
	snapFailures int
	// copyFails counts failed copies to the controller.
	copyFails int
	// restored is the ID of the newest restore whose part is done here.
	restored string
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
		snapshotNewest: prometheus.NewDesc("harmony_agent_etcd_snapshot_newest_timestamp_seconds",
			"When the newest etcd snapshot on this node's data disk was taken (Unix time); absent while there is none.", nil, nil),
		snapshotCount: prometheus.NewDesc("harmony_agent_etcd_snapshots",
			"How many etcd snapshots this node's data disk holds.", nil, nil),
		snapFailed: prometheus.NewDesc("harmony_agent_etcd_snapshot_failures_total",
			"Snapshots this node's etcd member was due for and could not take, since the agent started.", nil, nil),
		copyFailures: prometheus.NewDesc("harmony_agent_etcd_snapshot_copy_failures_total",
			"Copies of this node's newest etcd snapshot to the controller that failed, since the agent started.", nil, nil),
		snapshotInterval: prometheus.NewDesc("harmony_agent_etcd_snapshot_interval_seconds",
			"How often this node's etcd member is to be snapshotted, from its role; absent while snapshots are off.", nil, nil),
	}
}

func (m *metrics) copyFailed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.copyFails++
}

// setSnapshots records a pass's look at the snapshots; err is its failure.
func (m *metrics) setSnapshots(s snapshotState, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snaps, m.snapsKnown = s, true
	if err != nil {
		m.snapFailures++
	}
}

func (m *metrics) set(o observation, name string, sched v1.EtcdSnapshotSchedule) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.enabled = true
	m.interval = 0
	if sched.Enabled {
		m.interval = sched.Interval
	}
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
	m.isLead, m.isLearn, m.hasLead, m.interval = false, false, false, 0
	m.snaps, m.snapsKnown = snapshotState{}, false
	m.restored = ""
}

// Describe implements prometheus.Collector.
func (c *Component) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.metrics.info, c.metrics.leader, c.metrics.learner, c.metrics.hasLeader,
		c.metrics.snapshotNewest, c.metrics.snapshotCount, c.metrics.snapFailed, c.metrics.copyFailures, c.metrics.snapshotInterval} {
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
	ch <- prometheus.MustNewConstMetric(m.snapFailed, prometheus.CounterValue, float64(m.snapFailures))
	ch <- prometheus.MustNewConstMetric(m.copyFailures, prometheus.CounterValue, float64(m.copyFails))
	if m.interval > 0 {
		ch <- prometheus.MustNewConstMetric(m.snapshotInterval, prometheus.GaugeValue, m.interval.Seconds())
	}
	if m.snapsKnown {
		ch <- prometheus.MustNewConstMetric(m.snapshotCount, prometheus.GaugeValue, float64(len(m.snaps.taken)))
		if newest := m.snaps.newest(); !newest.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.snapshotNewest, prometheus.GaugeValue, float64(newest.Unix()))
		}
	}
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

// Snapshots is when each snapshot on the data disk was taken, oldest
// first (the newest MaxReportedSnapshots); none when this node runs no
// member: the agent reports them, and a restore names one of them.
func (c *Component) Snapshots() []time.Time {
	m := c.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.enabled || !m.snapsKnown {
		return nil
	}
	taken := m.snaps.taken
	return slices.Clone(taken[max(0, len(taken)-v1.MaxReportedSnapshots):])
}

// setRestored records the newest restore done here.
func (m *metrics) setRestored(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.restored = id
}

// Restored is the ID of the newest etcd restore (etcd.restore) whose part
// this member has done, "" when none or this node runs no member: the
// agent reports it in its status, and the control plane restarts on it.
// It is known from early in a pass, before the member is asked anything,
// so that a pass that fails later does not hide it.
func (c *Component) Restored() string {
	m := c.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restored
}
