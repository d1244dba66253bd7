package v1_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestDecodeStatus(t *testing.T) {
	valid := mustJSON(t, validStatus())
	manyAddrs := func(n int) []string {
		var a []string
		for i := range n {
			a = append(a, fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		}
		return a
	}
	manyComponents := func(n int) []v1.ComponentStatus {
		var c []v1.ComponentStatus
		for i := range n {
			c = append(c, v1.ComponentStatus{Name: fmt.Sprintf("c%d", i)})
		}
		return c
	}

	tests := []struct {
		name  string
		mut   func(s *v1.Status)
		raw   []byte
		field string
	}{
		{name: "valid", mut: func(*v1.Status) {}, field: okField},
		{name: "enrolled", mut: func(s *v1.Status) { s.Phase = v1.PhaseEnrolled }, field: okField},
		{name: "converging", mut: func(s *v1.Status) { s.Phase = v1.PhaseConverging }, field: okField},
		{name: "degraded", mut: func(s *v1.Status) { s.Phase = v1.PhaseDegraded }, field: okField},
		{name: "leaving", mut: func(s *v1.Status) { s.Phase = v1.PhaseLeaving }, field: okField},
		{name: "left", mut: func(s *v1.Status) { s.Phase = v1.PhaseLeft }, field: okField},
		{name: "lowercase left", mut: func(s *v1.Status) { s.Phase = "left" }, field: "phase"},
		{name: "64 addresses", mut: func(s *v1.Status) { s.Addresses = manyAddrs(64) }, field: okField},
		{name: "32 components", mut: func(s *v1.Status) { s.Components = manyComponents(32) }, field: okField},
		{name: "message of 1024 bytes", mut: func(s *v1.Status) { s.Components[0].Message = strings.Repeat("x", 1024) }, field: okField},
		{name: "agent version of 64 characters", mut: func(s *v1.Status) { s.AgentVersion = strings.Repeat("v", 64) }, field: okField},
		{name: "capabilities", mut: func(s *v1.Status) {
			s.Capabilities = []string{v1.CapabilityHandOver, v1.CapabilityKeepPods, v1.CapabilityVRRPv3}
		}, field: okField},
		{name: "exactly the size limit", raw: padTo(t, valid, v1.MaxStatusBytes), field: okField},

		{name: "wrong apiVersion", mut: func(s *v1.Status) { s.APIVersion = "" }, field: "apiVersion"},
		{name: "wrong kind", mut: func(s *v1.Status) { s.Kind = "status" }, field: "kind"},
		{name: "negative revision", mut: func(s *v1.Status) { s.ObservedRevision = -1 }, field: "observedRevision"},
		{name: "empty phase", mut: func(s *v1.Status) { s.Phase = "" }, field: "phase"},
		{name: "lowercase phase", mut: func(s *v1.Status) { s.Phase = "ready" }, field: "phase"},
		{name: "agent version with space", mut: func(s *v1.Status) { s.AgentVersion = "v1 beta" }, field: "agentVersion"},
		{name: "agent version too long", mut: func(s *v1.Status) { s.AgentVersion = strings.Repeat("v", 65) }, field: "agentVersion"},
		{name: "empty capability", mut: func(s *v1.Status) { s.Capabilities = []string{v1.CapabilityHandOver, ""} }, field: "capabilities[1]"},
		{name: "capability with space", mut: func(s *v1.Status) { s.Capabilities = []string{"leave hand over"} }, field: "capabilities[0]"},
		{name: "33 capabilities", mut: func(s *v1.Status) { s.Capabilities = make([]string, 33) }, field: "capabilities"},
		{name: "etcd member ID with slash", mut: func(s *v1.Status) { s.EtcdMemberID = "a/b" }, field: "etcdMemberID"},
		{name: "etcd restored", mut: func(s *v1.Status) { s.EtcdRestored = "r-20261129-1" }, field: okField},
		{name: "etcd restored with slash", mut: func(s *v1.Status) { s.EtcdRestored = "r/1" }, field: "etcdRestored"},
		{name: "node ready lowercase", mut: func(s *v1.Status) { s.KubernetesNode.Ready = "true" }, field: "kubernetesNode.ready"},
		{name: "node reason with space", mut: func(s *v1.Status) { s.KubernetesNode.Reason = "not ready" }, field: "kubernetesNode.reason"},
		{name: "kubelet version with slash", mut: func(s *v1.Status) { s.KubernetesNode.KubeletVersion = "v1/34" }, field: "kubernetesNode.kubeletVersion"},
		{name: "node message too long", mut: func(s *v1.Status) { s.KubernetesNode.Message = strings.Repeat("m", 1025) }, field: "kubernetesNode.message"},
		{name: "65 addresses", mut: func(s *v1.Status) { s.Addresses = manyAddrs(65) }, field: "addresses"},
		{name: "bad address", mut: func(s *v1.Status) { s.Addresses[1] = "fd00::11/64" }, field: "addresses[1]"},
		{name: "33 components", mut: func(s *v1.Status) { s.Components = manyComponents(33) }, field: "components"},
		{name: "uppercase component name", mut: func(s *v1.Status) { s.Components[0].Name = "Kubelet" }, field: "components[0].name"},
		{name: "empty component name", mut: func(s *v1.Status) { s.Components[1].Name = "" }, field: "components[1].name"},
		{name: "component phase with newline", mut: func(s *v1.Status) { s.Components[0].Phase = "Running\n" }, field: "components[0].phase"},
		{name: "component version too long", mut: func(s *v1.Status) { s.Components[1].Version = strings.Repeat("1", 65) }, field: "components[1].version"},
		{name: "message of 1025 bytes", mut: func(s *v1.Status) { s.Components[1].Message = strings.Repeat("x", 1025) }, field: "components[1].message"},

		{name: "unknown field", raw: []byte(`{"apiVersion":"harmony.dev/v1","kind":"Status","phase":"Ready","uptime":3}`), field: "uptime"},
		{name: "healthy as a string", raw: []byte(`{"components":[{"name":"etcd","healthy":"yes"}]}`), field: "components.healthy"},
		{name: "revision as a float", raw: []byte(`{"observedRevision":1.5}`), field: "observedRevision"},
		{name: "trailing data", raw: append(append([]byte{}, valid...), "]"...), field: ""},
		{name: "empty", raw: []byte("\t"), field: ""},
		{name: "one byte over the size limit", raw: padTo(t, valid, v1.MaxStatusBytes+1), field: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.raw
			if data == nil {
				s := validStatus()
				tc.mut(s)
				data = mustJSON(t, s)
			}
			got, err := v1.DecodeStatus(bytes.NewReader(data))
			checkResult(t, err, tc.field)
			if err != nil {
				if got != nil {
					t.Errorf("returned a status along with error %v", err)
				}
				return
			}
			if err := got.Validate(); err != nil {
				t.Errorf("decoded status does not validate: %v", err)
			}
		})
	}
}

func TestDecodeStatusKeepsFields(t *testing.T) {
	want := validStatus()
	got, err := v1.DecodeStatus(bytes.NewReader(mustJSON(t, want)))
	if err != nil {
		t.Fatal(err)
	}
	if !semanticEqual(got, want) {
		t.Errorf("decoded %+v\nwant %+v", got, want)
	}
}

// A clipped message is one the controller accepts: cut between
// characters, and invalid bytes (which JSON would send as three-byte
// U+FFFD) replaced, so a long message cannot get the whole report refused.
func TestClippedMessagesPassValidation(t *testing.T) {
	for _, msg := range []string{
		strings.Repeat("a", 1023) + "é and more",
		strings.Repeat("x", 1022) + "“quoted”",
		strings.Repeat("\xff", 400) + strings.Repeat("b", 800),
	} {
		n := &v1.KubernetesNodeStatus{Ready: "False", Message: msg}
		n.Clamp()
		clipped := v1.ClipMessage(msg)
		st := validStatus()
		st.KubernetesNode = n
		st.Components = []v1.ComponentStatus{{Name: "kubeadm", Phase: "Failed", Message: clipped}}
		if _, err := v1.DecodeStatus(bytes.NewReader(mustJSON(t, st))); err != nil {
			t.Errorf("a clipped message of %d bytes: %v", len(msg), err)
		}
		// A valid message loses no more than the character cut in two.
		short := utf8.ValidString(msg) && (len(clipped) < v1.MaxMessageBytes-3 || !strings.HasPrefix(msg, clipped))
		if !utf8.ValidString(clipped) || len(clipped) > v1.MaxMessageBytes || short {
			t.Errorf("clipped to %d bytes, valid UTF-8 %v", len(clipped), utf8.ValidString(clipped))
		}
	}
}
