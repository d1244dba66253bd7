package reconcile

import (
	"errors"
	"fmt"
	"testing"
)

// Failed tells a refusal (Refuse, also wrapped) from any other failure:
// only the refusal is PhaseRefused, and both keep the error's message.
func TestFailedTellsARefusal(t *testing.T) {
	lacks := errors.New("this image carries no kubelet of v1.32.9")
	for _, c := range []struct {
		err   error
		phase string
	}{
		{Refuse(lacks), PhaseRefused},
		{fmt.Errorf("kubeadm: %w", Refuse(lacks)), PhaseRefused},
		{lacks, PhaseFailed},
		{fmt.Errorf("kubeadm join: %w", errors.New("connection refused")), PhaseFailed},
	} {
		st := Status{Component: "kubeadm", Healthy: true}.Failed(c.err)
		if st.Phase != c.phase || st.Healthy || st.Message != c.err.Error() {
			t.Errorf("Failed(%q) = phase %s, healthy %v, message %q; want %s, unhealthy, the error's message", c.err, st.Phase, st.Healthy, st.Message, c.phase)
		}
	}
	if !errors.Is(Refuse(lacks), lacks) {
		t.Error("a refusal does not wrap its error")
	}
}
