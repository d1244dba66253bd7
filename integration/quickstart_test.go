package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// binaries returns the directory of the built binaries: $HARMONY_BIN (set
// by make test), else a fresh build into a temporary directory.
func binaries(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("HARMONY_BIN"); dir != "" {
		return dir
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "../cmd/harmony-agent", "../cmd/harmony-controller", "../cmd/harmonyctl")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build binaries: %v\n%s", err, out)
	}
	return dir
}

func run(t *testing.T, env []string, bin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestQuickStart walks the README's quick start with the real binaries:
// controller, node add, agent enrollment, the role in the agent's log, a
// refused second use of the token, and a scrape with a scraper
// certificate. Then both restart without losing anything.
func TestQuickStart(t *testing.T) {
	bin := binaries(t)
	dir := t.TempDir()
	ctlPort, metricsPort := freePort(t), freePort(t)
	dataDir := filepath.Join(dir, "controller")
	env := []string{"HARMONY_CONFIG=" + filepath.Join(dataDir, "admin.conf")}
	harmonyctl := filepath.Join(bin, "harmonyctl")

	ctl := testutil.StartProc(t, filepath.Join(bin, "harmony-controller"), nil,
		"serve", "--data-dir", dataDir, "--listen", fmt.Sprintf("127.0.0.1:%d", ctlPort))
	ctl.WaitLog(t, "controller serving")

	bootFile := filepath.Join(dir, "w1.json")
	if _, stderr, err := run(t, env, harmonyctl, "node", "add", "w1", "--cluster", "demo", "--role", "worker", "--ip", "127.0.0.1", "-o", bootFile); err != nil {
		t.Fatalf("node add: %v\n%s", err, stderr)
	}
	if fileMode(t, bootFile) != 0o600 {
		t.Fatalf("bootstrap file mode %04o", fileMode(t, bootFile))
	}
	copyFile := filepath.Join(dir, "w1-copy.json")
	data, _ := os.ReadFile(bootFile)
	os.WriteFile(copyFile, data, 0o600)

	agentArgs := []string{"--bootstrap-file", bootFile, "--state-dir", filepath.Join(dir, "agent"),
		"--address", "127.0.0.1", "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", metricsPort), "--no-guestinfo"}
	agent := testutil.StartProc(t, filepath.Join(bin, "harmony-agent"), nil, agentArgs...)
	agent.WaitLog(t, "new role revision", "revision=1", "role=worker", "cluster=demo")

	// Second use of the same token: refused, with the reason on both sides.
	second := testutil.StartProc(t, filepath.Join(bin, "harmony-agent"), nil, "--bootstrap-file", copyFile,
		"--state-dir", filepath.Join(dir, "agent2"), "--address", "127.0.0.1", "--metrics-listen", "", "--no-guestinfo")
	second.WaitLog(t, "enrollment refused", "reason=token_used", "already used")
	ctl.WaitLog(t, "enrollment refused", "reason=token_used", "node=w1")
	second.Stop(t)

	// A role change reaches the agent.
	roleJSON, stderr, err := run(t, env, harmonyctl, "node", "role", "w1")
	if err != nil {
		t.Fatalf("node role: %v\n%s", err, stderr)
	}
	roleJSON = strings.Replace(roleJSON, `"name": "demo"`, `"name": "demo", "vip": "198.18.0.10", "vrid": 7`, 1)
	roleFile := filepath.Join(dir, "role.json")
	os.WriteFile(roleFile, []byte(roleJSON), 0o600)
	if _, stderr, err := run(t, env, harmonyctl, "node", "set-role", "w1", "-f", roleFile); err != nil {
		t.Fatalf("set-role: %v\n%s", err, stderr)
	}
	agent.WaitLog(t, "new role revision", `\"vip\":\"198.18.0.10\"`)

	// A bad role file is refused before anything changes, naming the field.
	os.WriteFile(roleFile, []byte(strings.Replace(roleJSON, `"vrid": 7`, `"vrid": 700`, 1)), 0o600)
	_, stderr, err = run(t, env, harmonyctl, "node", "set-role", "w1", "-f", roleFile)
	if err == nil || !strings.Contains(stderr, "cluster.vrid") {
		t.Fatalf("bad role: err %v, stderr %q", err, stderr)
	}

	// Scrape the agent with a scraper certificate from harmonyctl.
	scraperDir := filepath.Join(dir, "scraper")
	if _, stderr, err := run(t, env, harmonyctl, "cert", "scraper", "prometheus", "--out-dir", scraperDir); err != nil {
		t.Fatalf("cert scraper: %v\n%s", err, stderr)
	}
	if fileMode(t, filepath.Join(scraperDir, "prometheus.key")) != 0o600 {
		t.Fatal("scraper key is not 0600")
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(scraperDir, "prometheus.crt"), filepath.Join(scraperDir, "prometheus.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(scraperDir, "ca.crt"))
	status, body, err := scrape(caPEM, &pair, fmt.Sprintf("https://127.0.0.1:%d/metrics", metricsPort))
	if err != nil || status != 200 || !strings.Contains(body, `harmony_agent_enrollment_state{state="enrolled"} 1`) {
		t.Fatalf("scrape: %d %v\n%s", status, err, body)
	}

	// Restart both: nothing is lost, nothing re-enrolls.
	agent.Stop(t)
	ctl.Stop(t)
	ctl = testutil.StartProc(t, filepath.Join(bin, "harmony-controller"), nil,
		"serve", "--data-dir", dataDir, "--listen", fmt.Sprintf("127.0.0.1:%d", ctlPort))
	ctl.WaitLog(t, "controller serving")
	agent = testutil.StartProc(t, filepath.Join(bin, "harmony-agent"), nil, agentArgs...)
	agent.WaitLog(t, "role unchanged since the last run", "revision=2")
	if strings.Contains(agent.Out.String(), "msg=enrolling") {
		t.Fatalf("restarted agent enrolled again:\n%s", agent.Out.String())
	}
	list, stderr, err := run(t, env, harmonyctl, "node", "list", "-o", "json")
	if err != nil {
		t.Fatalf("node list: %v\n%s", err, stderr)
	}
	if !strings.Contains(list, `"name": "w1"`) || !strings.Contains(list, `"roleRevision": 2`) {
		t.Fatalf("node list after restart:\n%s", list)
	}

	// harmonyctl refuses to run without a credential, and says why.
	_, stderr, err = run(t, []string{"HARMONY_CONFIG=" + filepath.Join(dir, "missing.conf")}, harmonyctl, "node", "list")
	if err == nil || !strings.Contains(stderr, "missing.conf") {
		t.Fatalf("harmonyctl without config: err %v, stderr %q", err, stderr)
	}
	// And the controller refuses the admin API to anyone without one.
	status, _, err = scrape(caPEM, nil, fmt.Sprintf("https://127.0.0.1:%d%s", ctlPort, v1.PathNodes))
	if err != nil || status != 401 {
		t.Fatalf("anonymous admin call: %d %v", status, err)
	}
}
