package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/harmonykaas/harmony/agent/components/kubeadm"
)

// checkAuditLog: every master's apiserver keeps its audit log, readable by
// root alone, and the one the VIP's HAProxy picked recorded the creation of
// the pod network's Deployment with what was asked.
func (l *labUnderTest) checkAuditLog(t *testing.T) {
	var recorded []string
	for _, m := range l.masters(t) {
		path := l.body(t, m.Name).Path(kubeadm.AuditLogFile)
		info, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: %v", m.Name, err)
			continue
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s's audit log has mode %v, want it readable by root alone", m.Name, info.Mode().Perm())
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var e struct {
				Level     string `json:"level"`
				Verb      string `json:"verb"`
				ObjectRef *struct {
					Resource string `json:"resource"`
					Name     string `json:"name"`
				} `json:"objectRef"`
				RequestObject json.RawMessage `json:"requestObject"`
			}
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.ObjectRef == nil {
				continue
			}
			if e.Verb == "create" && e.ObjectRef.Resource == "deployments" && e.ObjectRef.Name == netexecApp &&
				e.Level == "Request" && strings.Contains(string(e.RequestObject), `"replicas":2`) {
				recorded = append(recorded, m.Name)
			}
		}
		if err := sc.Err(); err != nil {
			t.Errorf("%s's audit log: %v", m.Name, err)
		}
		f.Close()
	}
	if len(recorded) == 0 {
		t.Error("no master's audit log recorded the Deployment's creation with its request")
	}
}
