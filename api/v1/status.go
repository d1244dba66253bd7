package v1

import (
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"time"
)

// Status is what an agent observes of its node and reports. The controller
// sets NodeName from the client certificate and ReportedAt on receipt.
type Status struct {
	APIVersion       string            `json:"apiVersion"`
	Kind             string            `json:"kind"`
	NodeName         string            `json:"nodeName,omitempty"`
	ReportedAt       time.Time         `json:"reportedAt,omitzero"`
	ObservedRevision int64             `json:"observedRevision"`
	Phase            string            `json:"phase"`
	AgentVersion     string            `json:"agentVersion,omitempty"`
	Addresses        []string          `json:"addresses,omitempty"`
	EtcdMemberID     string            `json:"etcdMemberID,omitempty"`
	Components       []ComponentStatus `json:"components,omitempty"`
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

const maxComponents = 32

var shortText = regexp.MustCompile(`^[A-Za-z0-9_.:+-]{0,64}$`)

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
	if !shortText.MatchString(s.EtcdMemberID) {
		return fieldErr("etcdMemberID", "must be at most 64 characters of [A-Za-z0-9_.:+-]")
	}
	if len(s.Addresses) > 64 {
		return fieldErr("addresses", "at most 64 addresses")
	}
	for i, a := range s.Addresses {
		if _, err := netip.ParseAddr(a); err != nil {
			return fieldErr(fmt.Sprintf("addresses[%d]", i), "%q is not an IP address", a)
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
		if len(c.Message) > 1024 {
			return fieldErr(f+".message", "must be at most 1024 bytes")
		}
	}
	return nil
}
