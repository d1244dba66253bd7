package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent"
	"github.com/harmonykaas/harmony/agent/bootstrap"
	"github.com/harmonykaas/harmony/agent/identity"
	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/controller"
	"github.com/harmonykaas/harmony/controller/client"
)

func TestAgentEnrollsOnceAndRestartDoesNotReenroll(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	dir := t.TempDir()
	bootFile := filepath.Join(dir, "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	state := filepath.Join(dir, "state")

	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: state})
	first := ra.waitRole(t, 1)
	if first.NodeName != "w1" || first.Role != v1.RoleWorker {
		t.Fatalf("role %+v", first)
	}
	if got := fileMode(t, filepath.Join(state, identity.IdentityFile)); got != 0o600 {
		t.Fatalf("identity file mode %04o", got)
	}
	if got := fileMode(t, filepath.Join(state, agent.RoleFile)); got != 0o600 {
		t.Fatalf("role cache mode %04o", got)
	}
	// The used token is gone from the bootstrap file; the rest stays.
	data, _ := os.ReadFile(bootFile)
	left, err := v1.DecodeBootstrap(data)
	if err != nil || left.Token != "" || left.NodeName != "w1" {
		t.Fatalf("bootstrap file after enrollment: %v %+v", err, left)
	}
	serial := c.node(t, "w1").CertificateSerial
	// The agent reported its status.
	eventually(t, "status report", func() bool {
		n := c.node(t, "w1")
		return n.Status != nil && n.Status.Phase == v1.PhaseEnrolled && n.Status.ObservedRevision == first.Revision
	})
	ra.stop()

	// Put the token back, as if the agent crashed before removing it: the
	// restarted agent must recognise its own token, not enroll again.
	writeBootstrap(t, bootFile, b)
	ra2 := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: state})
	again := ra2.waitRole(t, first.Revision)
	if again.Revision != first.Revision {
		t.Fatalf("revision %d after restart, want %d", again.Revision, first.Revision)
	}
	if n := ra2.logs.Count("msg=enrolling"); n != 0 {
		t.Fatalf("restarted agent enrolled %d times; log:\n%s", n, ra2.logs.String())
	}
	if got := c.metric(t, "harmony_controller_enrollments_total{result=issued}"); got != 1 {
		t.Fatalf("controller issued %v enrollments, want 1", got)
	}
	if got := c.node(t, "w1").CertificateSerial; got != serial {
		t.Fatalf("certificate changed across restart: %s -> %s", serial, got)
	}
	eventually(t, "token removed again", func() bool {
		data, _ := os.ReadFile(bootFile)
		return !strings.Contains(string(data), `"token"`)
	})
	if !strings.Contains(ra2.logs.String(), "role unchanged since the last run") {
		t.Fatalf("restart log does not say the role is unchanged:\n%s", ra2.logs.String())
	}
}

func TestRoleChangeReachesWatchingAgent(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "m1", Role: v1.RoleMaster})
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: t.TempDir()})
	role := ra.waitRole(t, 1)

	eventually(t, "watch held", func() bool { return c.metric(t, "harmony_controller_role_watches_active") == 1 })
	role.Cluster.VIP = "198.18.0.10"
	role.Cluster.VRID = 42
	updated := c.setRole(t, role)
	got := ra.waitRole(t, updated.Revision)
	if got.Cluster.VIP != "198.18.0.10" || got.Cluster.VRID != 42 {
		t.Fatalf("agent got %+v", got.Cluster)
	}
	if !strings.Contains(ra.logs.String(), "revision="+itoa(updated.Revision)) {
		t.Fatalf("agent did not log revision %d:\n%s", updated.Revision, ra.logs.String())
	}
}

func TestAgentRenewsBeforeExpiry(t *testing.T) {
	const lifetime = 6 * time.Second
	c := startController(t, func(cfg *controller.Config) { cfg.CertLifetime = lifetime })
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	state := t.TempDir()
	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: state})
	ra.waitRole(t, 1)
	store := identity.Store{Dir: state}
	first, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a renewal", func() bool {
		return c.metric(t, "harmony_controller_renewals_total{result=issued}") >= 1
	})
	renewedAt := time.Now()
	if !renewedAt.Before(first.Leaf().NotAfter) {
		t.Fatalf("renewed at %s, after the certificate expired at %s", renewedAt, first.Leaf().NotAfter)
	}
	eventually(t, "the renewed certificate on disk", func() bool {
		id, err := store.Load()
		return err == nil && id.Leaf().SerialNumber.Cmp(first.Leaf().SerialNumber) != 0
	})
	next, _ := store.Load()
	if !next.Leaf().NotAfter.After(first.Leaf().NotAfter) {
		t.Fatal("renewed certificate does not outlive the first")
	}
	if next.Cert.PrivateKey.(*ecdsa.PrivateKey).Equal(first.Cert.PrivateKey) {
		t.Fatal("renewal kept the old key")
	}
	// Well past the first certificate's expiry, the agent still talks to
	// the controller: its watch works with the renewed certificate.
	time.Sleep(time.Until(first.Leaf().NotAfter.Add(time.Second)))
	role := c.role(t, "w1")
	role.Cluster.VIP = "198.18.0.10"
	updated := c.setRole(t, role)
	ra.waitRole(t, updated.Revision)
}

func TestReplacedBootstrapFileReenrollsWithoutRestart(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: t.TempDir()})
	ra.waitRole(t, 1)

	// The admin deletes and re-creates the node: the old certificate stops
	// working, and a new bootstrap file brings the agent back.
	if err := c.admin.Do(context.Background(), "DELETE", client.NodePath("w1", ""), nil, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent to notice", func() bool {
		return strings.Contains(ra.logs.String(), "node_gone")
	})
	b2 := c.addNode(t, v1.NodeSpec{Name: "w1"})
	writeBootstrap(t, bootFile, b2)
	newRole := c.role(t, "w1")
	ra.waitRole(t, newRole.Revision)
	if got := c.metric(t, "harmony_controller_enrollments_total{result=issued}"); got != 2 {
		t.Fatalf("enrollments issued %v, want 2", got)
	}

	// A new token for a live node re-keys it: the running agent sees the
	// replaced file (fsnotify) and enrolls again, without a restart.
	eventually(t, "watch held", func() bool { return c.metric(t, "harmony_controller_role_watches_active") == 1 })
	before := c.node(t, "w1").CertificateSerial
	var res v1.NodeWithBootstrap
	if err := c.admin.Do(context.Background(), "POST", client.NodePath("w1", "/token"), v1.TokenRequest{}, &res); err != nil {
		t.Fatal(err)
	}
	writeBootstrap(t, bootFile, res.Bootstrap)
	eventually(t, "re-enrollment", func() bool {
		return c.metric(t, "harmony_controller_enrollments_total{result=issued}") == 3
	})
	if c.node(t, "w1").CertificateSerial == before {
		t.Fatal("certificate unchanged after re-enrollment")
	}
	if !strings.Contains(ra.logs.String(), "bootstrap file changed") {
		t.Fatalf("agent log does not mention the new file:\n%s", ra.logs.String())
	}
}

func TestSecondUseOfTokenIsRefusedOnBothSides(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	dir := t.TempDir()
	writeBootstrap(t, filepath.Join(dir, "a.json"), b)
	writeBootstrap(t, filepath.Join(dir, "b.json"), b)
	first := startAgent(t, agent.Config{BootstrapFile: filepath.Join(dir, "a.json"), StateDir: filepath.Join(dir, "sa")})
	first.waitRole(t, 1)
	second := startAgent(t, agent.Config{BootstrapFile: filepath.Join(dir, "b.json"), StateDir: filepath.Join(dir, "sb"),
		MetricsLocalListen: "127.0.0.1:0"})
	eventually(t, "the refusal in the agent log", func() bool {
		return strings.Contains(second.logs.String(), "reason=token_used")
	})
	if !strings.Contains(second.logs.String(), "already used") {
		t.Fatalf("agent log lacks a plain reason:\n%s", second.logs.String())
	}
	if !strings.Contains(c.logs.String(), "enrollment refused") || !strings.Contains(c.logs.String(), "reason=token_used") {
		t.Fatalf("controller log lacks the refusal:\n%s", c.logs.String())
	}
	resp, err := httpGet("http://" + second.a.MetricsAddrs()[0].String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`harmony_agent_enrollment_state{state="refused"} 1`, `harmony_agent_controller_request_errors_total{reason="token_used"} 1`} {
		if !strings.Contains(resp, want) {
			t.Errorf("second agent metrics lack %q", want)
		}
	}
	// The refused agent does not hammer the controller with the same token.
	time.Sleep(time.Second)
	if n := c.metric(t, "harmony_controller_enrollments_total{result=token_used}"); n != 1 {
		t.Fatalf("the used token was tried %v times, want 1", n)
	}
}

func TestAgentTriesEveryControllerURL(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "https://" + dead.Addr().String()
	dead.Close() // nothing listens there now
	b.Controllers = append([]string{deadURL}, b.Controllers...)
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: t.TempDir(), MetricsLocalListen: "127.0.0.1:0"})
	ra.waitRole(t, 1)
	metrics, err := httpGet("http://" + ra.a.MetricsAddrs()[0].String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(metrics, `harmony_agent_controller_request_errors_total{reason="connect"} 0`) {
		t.Fatalf("connect error not counted:\n%s", grepLines(metrics, "request_errors"))
	}
}

func TestPinOnlyBootstrap(t *testing.T) {
	c := startController(t)
	var res v1.NodeWithBootstrap
	spec := v1.NodeSpec{Name: "w1", Cluster: "demo", Role: v1.RoleWorker, IPs: []string{"127.0.0.1"}, CAPinOnly: true}
	if err := c.admin.Do(context.Background(), "POST", v1.PathNodes, spec, &res); err != nil {
		t.Fatal(err)
	}
	if res.Bootstrap.CABundle != "" {
		t.Fatal("pin-only document carries the CA")
	}
	good := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, good, res.Bootstrap)
	startAgent(t, agent.Config{BootstrapFile: good, StateDir: t.TempDir()}).waitRole(t, 1)

	// A pin of some other CA: the agent never sends its token to this server.
	spec.Name = "w2"
	if err := c.admin.Do(context.Background(), "POST", v1.PathNodes, spec, &res); err != nil {
		t.Fatal(err)
	}
	res.Bootstrap.CAPin = "sha256:" + strings.Repeat("ab", 32)
	bad := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bad, res.Bootstrap)
	ra := startAgent(t, agent.Config{BootstrapFile: bad, StateDir: t.TempDir()})
	eventually(t, "pin mismatch reported", func() bool {
		return strings.Contains(ra.logs.String(), "matches the pin")
	})
	if got := c.metric(t, "harmony_controller_enrollments_total{result=issued}"); got != 1 {
		t.Fatalf("enrollments %v: the wrong-pin agent enrolled", got)
	}
}

func TestAgentMetricsRequireScraperCertificate(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	state := t.TempDir()
	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: state, MetricsListen: "127.0.0.1:0"})
	ra.waitRole(t, 1)
	url := "https://" + ra.a.MetricsAddrs()[0].String() + "/metrics"
	caPEM := []byte(c.cfg.CertificateAuthority)

	if _, _, err := scrape(caPEM, nil, url); err == nil {
		t.Fatal("scrape without a client certificate succeeded")
	}
	// A node's own certificate is not a scraper's.
	nodeID, err := (identity.Store{Dir: state}).Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := scrape(caPEM, &nodeID.Cert, url); err == nil {
		t.Fatal("scrape with a node certificate succeeded")
	}
	scraper := issueScraper(t, c)
	status, body, err := scrape(caPEM, &scraper, url)
	if err != nil || status != 200 {
		t.Fatalf("scrape with a scraper certificate: %d %v", status, err)
	}
	for _, want := range []string{
		"harmony_agent_build_info", `harmony_agent_enrollment_state{state="enrolled"} 1`,
		"harmony_agent_certificate_expiry_timestamp_seconds", "harmony_agent_role_revision 1",
		"harmony_agent_controller_request_errors_total",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The alert rules take the certificate's lifetime from these two.
	leaf := nodeID.Leaf()
	for name, want := range map[string]time.Time{
		"harmony_agent_certificate_start_timestamp_seconds":  leaf.NotBefore,
		"harmony_agent_certificate_expiry_timestamp_seconds": leaf.NotAfter,
	} {
		if got := gaugeValue(body, name); got != float64(want.Unix()) {
			t.Errorf("%s = %v, want %d (the node certificate's)", name, got, want.Unix())
		}
	}
}

// gaugeValue is the value of an unlabelled metric in a scrape, or -1.
func gaugeValue(body, name string) float64 {
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return -1
}

func issueScraper(t *testing.T, c *ctl) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "prometheus"}}, key)
	var res v1.CertificateResponse
	if err := c.admin.Do(context.Background(), "POST", v1.PathScraperCert, v1.ScraperCertRequest{Name: "prometheus", CSR: v1.EncodeCSR(der)}, &res); err != nil {
		t.Fatal(err)
	}
	certs, err := v1.ParseCertificatesPEM([]byte(res.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{certs[0].Raw}, PrivateKey: key}
}

// TestAgentReadsGuestinfo runs the agent with no bootstrap file, against a
// stand-in for open-vm-tools' vmware-rpctool. The real tool only answers
// inside a VMware VM, which cannot run here.
func TestAgentReadsGuestinfo(t *testing.T) {
	c := startController(t)
	tool, store := guestinfoTool(t, c.addNode(t, v1.NodeSpec{Name: "w1"}))
	ra := startAgent(t, agent.Config{Guestinfo: bootstrap.RPCTool{Path: tool}, StateDir: t.TempDir()})
	ra.waitRole(t, 1)
	// The agent wrote the document back without its token.
	left, _ := os.ReadFile(store)
	raw, err := base64.StdEncoding.DecodeString(string(left))
	if err != nil {
		t.Fatalf("guestinfo after enrollment is not base64: %q", left)
	}
	var doc v1.Bootstrap
	if err := json.Unmarshal(raw, &doc); err != nil || doc.Token != "" || doc.NodeName != "w1" {
		t.Fatalf("guestinfo after enrollment: %v %+v", err, doc)
	}
}

// A VM off for longer than a node certificate lives: its agent starts
// with an expired certificate that it cannot renew, runs on from its
// cached role, and polls its guestinfo. The new bootstrap the controller
// writes there (the cluster engine does, for a running VM whose node's
// certificate expired) enrolls it again, without a restart.
func TestExpiredAgentEnrollsAgainFromGuestinfo(t *testing.T) {
	c := startController(t, func(cfg *controller.Config) { cfg.CertLifetime = 5 * time.Second })
	tool, store := guestinfoTool(t, c.addNode(t, v1.NodeSpec{Name: "w1"}))
	state := t.TempDir()
	ra := startAgent(t, agent.Config{Guestinfo: bootstrap.RPCTool{Path: tool}, StateDir: state})
	ra.waitRole(t, 1)
	ra.stop()
	// Read after the stop: a slow machine may have let it renew once.
	first, err := identity.Store{Dir: state}.Load()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(first.Leaf().NotAfter.Add(time.Second)))

	again := startAgent(t, agent.Config{Guestinfo: bootstrap.RPCTool{Path: tool}, StateDir: state})
	eventually(t, "the agent to find its certificate expired", func() bool {
		return strings.Contains(again.logs.String(), "certificate expired and no bootstrap token is available")
	})
	var res v1.NodeWithBootstrap
	if err := c.admin.Do(context.Background(), "POST", client.NodePath("w1", "/token"), v1.TokenRequest{}, &res); err != nil {
		t.Fatal(err)
	}
	enc, err := res.Bootstrap.EncodeGuestinfo()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store, []byte(enc), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second enrollment", func() bool {
		return c.metric(t, "harmony_controller_enrollments_total{result=issued}") == 2
	})
	eventually(t, "a valid certificate on disk", func() bool {
		id, err := identity.Store{Dir: state}.Load()
		return err == nil && id.Leaf().NotAfter.After(time.Now()) && id.Leaf().SerialNumber.Cmp(first.Leaf().SerialNumber) != 0
	})
}

// guestinfoTool is a stand-in for open-vm-tools' vmware-rpctool holding
// the one guestinfo key the agent reads, in the file store, first with b.
// The real tool only answers inside a VMware VM, which cannot run here.
func guestinfoTool(t *testing.T, b v1.Bootstrap) (tool, store string) {
	t.Helper()
	enc, err := b.EncodeGuestinfo()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store = filepath.Join(dir, "guestinfo.harmony.bootstrap")
	if err := os.WriteFile(store, []byte(enc), 0o600); err != nil {
		t.Fatal(err)
	}
	tool = filepath.Join(dir, "vmware-rpctool")
	script := `#!/bin/sh
# Stand-in for vmware-rpctool: one guestinfo key kept in a file.
set -e
case "$1" in
  "info-get guestinfo.harmony.bootstrap") cat "` + store + `" ;;
  "info-get "*) echo "No value found"; exit 1 ;;
  "info-set guestinfo.harmony.bootstrap "*) printf '%s' "${1#info-set guestinfo.harmony.bootstrap }" > "` + store + `" ;;
  *) echo "unknown command" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(tool, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return tool, store
}

func TestAgentReadsOVFEnvironmentFile(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "w1"})
	enc, _ := b.EncodeGuestinfo()
	env := `<?xml version="1.0" encoding="UTF-8"?>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1"
     xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"
     oe:id="w1">
  <PropertySection>
    <Property oe:key="hostname" oe:value="w1"/>
    <Property oe:key="harmony.bootstrap" oe:value="` + enc + `"/>
  </PropertySection>
</Environment>`
	path := filepath.Join(t.TempDir(), "ovf-env.xml")
	os.WriteFile(path, []byte(env), 0o600)
	startAgent(t, agent.Config{OVFEnvFile: path, StateDir: t.TempDir()}).waitRole(t, 1)
}

func TestExpiredTokenIsRefusedToTheAgent(t *testing.T) {
	c := startController(t)
	b := c.addNode(t, v1.NodeSpec{Name: "w1", TokenTTL: "1s"})
	time.Sleep(1500 * time.Millisecond)
	bootFile := filepath.Join(t.TempDir(), "bootstrap.json")
	writeBootstrap(t, bootFile, b)
	ra := startAgent(t, agent.Config{BootstrapFile: bootFile, StateDir: t.TempDir()})
	eventually(t, "token_expired in the agent log", func() bool {
		return strings.Contains(ra.logs.String(), "reason=token_expired")
	})
	// A new token, dropped into the same file, gets the node enrolled.
	var res v1.NodeWithBootstrap
	if err := c.admin.Do(context.Background(), "POST", client.NodePath("w1", "/token"), v1.TokenRequest{}, &res); err != nil {
		t.Fatal(err)
	}
	writeBootstrap(t, bootFile, res.Bootstrap)
	ra.waitRole(t, 1)
}
