package v1

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// An agent reports its status on every change and at least every
// StatusHeartbeat. The controller shows a node whose agent has been silent
// for StatusStaleAfter, three heartbeats, as Unresponsive, whatever it
// last said.
const (
	StatusHeartbeat  = 5 * time.Minute
	StatusStaleAfter = 3 * StatusHeartbeat
)

// Status is what an agent observes of its node and reports. The controller
// sets NodeName from the client certificate and ReportedAt on receipt.
type Status struct {
	APIVersion       string    `json:"apiVersion"`
	Kind             string    `json:"kind"`
	NodeName         string    `json:"nodeName,omitempty"`
	ReportedAt       time.Time `json:"reportedAt,omitzero"`
	ObservedRevision int64     `json:"observedRevision"`
	Phase            string    `json:"phase"`
	AgentVersion     string    `json:"agentVersion,omitempty"`
	// Capabilities names what the agent understands of roles beyond the
	// first v1 (Capability*): a controller never sends an agent a field
	// it would not act on, as an older agent refuses it (roles decode
	// strictly) rather than read a hand-over as a full leave.
	Capabilities []string `json:"capabilities,omitempty"`
	Addresses    []string `json:"addresses,omitempty"`
	EtcdMemberID string   `json:"etcdMemberID,omitempty"`
	// EtcdSnapshotAt is when the newest etcd snapshot on the node's data
	// disk was taken; nil when there is none.
	EtcdSnapshotAt *time.Time `json:"etcdSnapshotAt,omitempty"`
	// EtcdSnapshots is when each etcd snapshot on the node's data disk
	// was taken, oldest first: the newest MaxReportedSnapshots. A
	// restore names one of them.
	EtcdSnapshots []time.Time `json:"etcdSnapshots,omitempty"`
	// EtcdRestored is the ID of the newest etcd restore (etcd.restore)
	// whose part the node has done.
	EtcdRestored string `json:"etcdRestored,omitempty"`
	// KubernetesNode is the node's Kubernetes Node as the API last showed
	// it to the node; nil before the node has joined.
	KubernetesNode *KubernetesNodeStatus `json:"kubernetesNode,omitempty"`
	Components     []ComponentStatus     `json:"components,omitempty"`
}

// Capabilities an agent reports.
const (
	// CapabilityHandOver: the agent acts on leave.handOver (a master
	// steps out of service for its replacement, keeping its member).
	CapabilityHandOver = "leave.handOver"
	// CapabilityKeepPods: the agent acts on leave.keepPods (its drain
	// never gives up).
	CapabilityKeepPods = "leave.keepPods"
	// CapabilityVRRPv3: the agent runs keepalived with
	// cluster.loadBalancer.vrrpVersion 3 and its advertInterval.
	CapabilityVRRPv3 = "loadBalancer.vrrpVersion3"
	// CapabilityEtcdSnapshots: the agent takes etcd.snapshots (and
	// reports etcdSnapshotAt).
	CapabilityEtcdSnapshots = "etcd.snapshots"
	// CapabilityEtcdRestore: the agent acts on etcd.restore (and reports
	// etcdRestored).
	CapabilityEtcdRestore = "etcd.restore"
	// CapabilityEtcdRestoreFromController: the agent acts on
	// etcd.restore.fromController (and sends its snapshots to the
	// controller).
	CapabilityEtcdRestoreFromController = "etcd.restore.fromController"
	// CapabilityEtcdRemoveMembers: the agent removes the members
	// etcd.removeMembers names.
	CapabilityEtcdRemoveMembers = "etcd.removeMembers"

	maxCapabilities = 32
)

// MaxReportedSnapshots bounds Status.EtcdSnapshots: the most a schedule
// keeps (EtcdSnapshots.Keep), and a few an admin saved beside them.
const MaxReportedSnapshots = 128

// KubernetesNodeStatus is a Kubernetes Node's Ready condition and kubelet.
type KubernetesNodeStatus struct {
	// Ready is the Ready condition's status: True, False or Unknown.
	Ready          string    `json:"ready"`
	Reason         string    `json:"reason,omitempty"`
	Message        string    `json:"message,omitempty"`
	KubeletVersion string    `json:"kubeletVersion,omitempty"`
	ObservedAt     time.Time `json:"observedAt"`
}

// ComponentStatus is one component's observed state.
type ComponentStatus struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	Phase   string `json:"phase,omitempty"`
	Version string `json:"version,omitempty"`
	Message string `json:"message,omitempty"`
}

// Agent phases.
const (
	PhaseEnrolled   = "Enrolled"
	PhaseConverging = "Converging"
	PhaseReady      = "Ready"
	PhaseDegraded   = "Degraded"
	// PhaseLeaving: the role says Leave and the node is leaving its
	// cluster; Components tell how far each part got.
	PhaseLeaving = "Leaving"
	// PhaseLeft: the node has left its cluster (etcd member removed,
	// kubeadm reset, VIP given up); the controller may power it off.
	PhaseLeft = "Left"
)

// ComponentRefused is the phase of a component whose part of the role
// this node cannot carry out, however often it is retried: the role names
// a Kubernetes version the node's image has no binaries of, say. The node
// needs another image, or its role another value. A controller replacing
// a VM rolls the replacement back at once on it, instead of waiting out
// its timeout. Every other component phase is the agent's own and only
// shown; an older agent never reports this one.
const ComponentRefused = "Refused"

const maxComponents = 32

// Clamp drops or cuts what Validate would refuse: the fields come from a
// cluster's API, which the agent relays and does not control.
func (n *KubernetesNodeStatus) Clamp() {
	if !shortText.MatchString(n.Reason) {
		n.Reason = ""
	}
	if !shortText.MatchString(n.KubeletVersion) {
		n.KubeletVersion = ""
	}
	n.Message = ClipMessage(n.Message)
}

// MaxMessageBytes bounds a status report's messages.
const MaxMessageBytes = 1024

// ClipMessage makes s a message Validate accepts: valid UTF-8 (an invalid
// byte would travel as U+FFFD, three bytes) of at most MaxMessageBytes,
// cut between characters.
func ClipMessage(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= MaxMessageBytes {
		return s
	}
	n := MaxMessageBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

var shortText = lazyregexp.New(`^[A-Za-z0-9_.:+-]{0,64}$`)

// DecodeStatus reads and validates a status report.
func DecodeStatus(r io.Reader) (*Status, error) {
	var s Status
	if err := decodeStrict(r, MaxStatusBytes, &s); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return &s, nil
}

// Validate checks every field of a status report.
func (s *Status) Validate() error {
	if s.APIVersion != APIVersion {
		return fieldErr("apiVersion", "must be %q, got %q", APIVersion, s.APIVersion)
	}
	if s.Kind != "Status" {
		return fieldErr("kind", "must be \"Status\", got %q", s.Kind)
	}
	if s.ObservedRevision < 0 {
		return fieldErr("observedRevision", "must not be negative")
	}
	switch s.Phase {
	case PhaseEnrolled, PhaseConverging, PhaseReady, PhaseDegraded, PhaseLeaving, PhaseLeft:
	default:
		return fieldErr("phase", "must be Enrolled, Converging, Ready, Degraded, Leaving or Left, got %q", s.Phase)
	}
	if !shortText.MatchString(s.AgentVersion) {
		return fieldErr("agentVersion", "must be at most 64 characters of [A-Za-z0-9_.:+-]")
	}
	if len(s.Capabilities) > maxCapabilities {
		return fieldErr("capabilities", "at most %d", maxCapabilities)
	}
	for i, c := range s.Capabilities {
		if c == "" || !shortText.MatchString(c) {
			return fieldErr(fmt.Sprintf("capabilities[%d]", i), "must be 1 to 64 characters of [A-Za-z0-9_.:+-]")
		}
	}
	if s.EtcdMemberID != "" {
		if _, err := ParseEtcdMemberID(s.EtcdMemberID); err != nil {
			return fieldErr("etcdMemberID", "%v", err)
		}
	}
	if len(s.EtcdSnapshots) > MaxReportedSnapshots {
		return fieldErr("etcdSnapshots", "at most %d", MaxReportedSnapshots)
	}
	if s.EtcdRestored != "" {
		if err := ValidateRestoreID(s.EtcdRestored); err != nil {
			return fieldErr("etcdRestored", "%v", err)
		}
	}
	if len(s.Addresses) > 64 {
		return fieldErr("addresses", "at most 64 addresses")
	}
	for i, a := range s.Addresses {
		if _, err := netip.ParseAddr(a); err != nil {
			return fieldErr(fmt.Sprintf("addresses[%d]", i), "%q is not an IP address", a)
		}
	}
	if n := s.KubernetesNode; n != nil {
		switch n.Ready {
		case "True", "False", "Unknown":
		default:
			return fieldErr("kubernetesNode.ready", "must be True, False or Unknown, got %q", n.Ready)
		}
		if !shortText.MatchString(n.Reason) {
			return fieldErr("kubernetesNode.reason", "must be at most 64 characters of [A-Za-z0-9_.:+-]")
		}
		if !shortText.MatchString(n.KubeletVersion) {
			return fieldErr("kubernetesNode.kubeletVersion", "must be at most 64 characters of [A-Za-z0-9_.:+-]")
		}
		if len(n.Message) > MaxMessageBytes {
			return fieldErr("kubernetesNode.message", "must be at most %d bytes", MaxMessageBytes)
		}
	}
	if len(s.Components) > maxComponents {
		return fieldErr("components", "at most %d components", maxComponents)
	}
	for i, c := range s.Components {
		f := fmt.Sprintf("components[%d]", i)
		if !labelPattern.MatchString(c.Name) {
			return fieldErr(f+".name", "%q is not a lowercase name", c.Name)
		}
		if !shortText.MatchString(c.Phase) {
			return fieldErr(f+".phase", "must be at most 64 characters of [A-Za-z0-9_.:+-]")
		}
		if !shortText.MatchString(c.Version) {
			return fieldErr(f+".version", "must be at most 64 characters of [A-Za-z0-9_.:+-]")
		}
		if len(c.Message) > MaxMessageBytes {
			return fieldErr(f+".message", "must be at most %d bytes", MaxMessageBytes)
		}
	}
	return nil
}
