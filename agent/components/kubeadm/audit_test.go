package kubeadm

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// auditEvent is what the tests read of an audit log line.
type auditEvent struct {
	Level      string `json:"level"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource string `json:"resource"`
		Name     string `json:"name"`
	} `json:"objectRef"`
	RequestObject json.RawMessage `json:"requestObject"`
}

// checkAuditLog, against the real apiserver: the log is root's alone; a
// Secret's creation is there with who made it, but not what it holds; a
// change elsewhere is there with what was asked; the nodes' serving
// requests are there; health checks and leases are not.
func checkAuditLog(t *testing.T, host *reconcile.Host, api *apiClient, admin *tls.Certificate) {
	t.Helper()
	const secretValue = "audit-probe-s3cr3t"
	encoded := base64.StdEncoding.EncodeToString([]byte(secretValue))
	mustSend(t, api, admin, http.MethodPost, "/api/v1/namespaces/default/secrets",
		`{"metadata":{"name":"audit-probe"},"data":{"password":"`+encoded+`"}}`, http.StatusCreated)
	mustSend(t, api, admin, http.MethodPost, "/api/v1/namespaces",
		`{"metadata":{"name":"audit-probe","labels":{"asked":"yes"}}}`, http.StatusCreated)

	if info, err := os.Stat(host.Path(AuditLogDir)); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v %v, want a directory of mode 0700", AuditLogDir, info, err)
	}
	if info, err := os.Stat(host.Path(AuditPolicyFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v %v, want mode 0600", AuditPolicyFile, info, err)
	}
	var events []auditEvent
	var data []byte
	find := func(verb, resource, name string) *auditEvent {
		for i, e := range events {
			if e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.Resource == resource && (name == "" || e.ObjectRef.Name == name) {
				return &events[i]
			}
		}
		return nil
	}
	testutil.Eventually(t, time.Minute, "the audit log to record the namespace's creation", func() bool {
		var err error
		if data, err = os.ReadFile(host.Path(AuditLogFile)); err != nil {
			return false
		}
		events = events[:0]
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e auditEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("audit log line %q: %v", tail(sc.Text(), 200), err)
			}
			events = append(events, e)
		}
		return find("create", "namespaces", "audit-probe") != nil
	})
	if info, err := os.Stat(host.Path(AuditLogFile)); err != nil || info.Mode().Perm()&0o077 != 0 {
		t.Errorf("%s: %v %v, want it readable by root alone", AuditLogFile, info, err)
	}

	if e := find("create", "secrets", "audit-probe"); e == nil || e.Level != "Metadata" || e.User.Username != "kubernetes-super-admin" {
		t.Errorf("the Secret's creation: %+v, want it at Metadata, by kubernetes-super-admin", e)
	}
	if bytes.Contains(data, []byte(secretValue)) || bytes.Contains(data, []byte(encoded)) {
		t.Error("the audit log holds the Secret's value")
	}
	if e := find("create", "namespaces", "audit-probe"); e == nil || e.Level != "Request" || !strings.Contains(string(e.RequestObject), `"asked":"yes"`) {
		t.Errorf("the namespace's creation: %+v, want it at Request with what was asked", e)
	}
	if e := find("create", "certificatesigningrequests", "w1-serving"); e == nil || e.User.Username != nodeUserPrefix+"w1" || len(e.RequestObject) != 0 {
		t.Errorf("w1's serving request: %+v, want it by w1, without the request", e)
	}
	if i := slices.IndexFunc(events, func(e auditEvent) bool {
		return strings.HasPrefix(e.RequestURI, "/readyz") || e.ObjectRef != nil && e.ObjectRef.Resource == "leases"
	}); i >= 0 {
		t.Errorf("the audit log records %+v", events[i])
	}
	t.Logf("audit log: %d events, %d bytes", len(events), len(data))
}

// The agent writes the audit log's directory under ProtectSystem=strict:
// its unit must let it, and the image must make the directory at boot,
// root's alone (a CI run once found every master stuck on "read-only
// file system" here).
func TestAgentUnitMayWriteTheAuditLog(t *testing.T) {
	unit, err := os.ReadFile("../../../systemd/harmony-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	if want := "ReadWritePaths=-" + AuditLogDir + "\n"; !strings.Contains(string(unit), want) {
		t.Errorf("harmony-agent.service lacks %q", want)
	}
	tmpfiles, err := os.ReadFile("../../../images/rootfs/etc/tmpfiles.d/harmony-agent.conf")
	if err != nil {
		t.Fatal(err)
	}
	if want := "d " + AuditLogDir + " 0700 root root -\n"; !strings.Contains(string(tmpfiles), want) {
		t.Errorf("the images' tmpfiles configuration lacks %q", want)
	}
}
