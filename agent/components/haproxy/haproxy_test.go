package haproxy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service/servicetest"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

func renderFor(t *testing.T, c *Component, role *v1.Role, root string) string {
	t.Helper()
	p := paths{RunDir: filepath.Join(root, RunDir)}
	if role.PKI != nil && role.PKI.ClusterCA != nil {
		p.CAFile = filepath.Join(root, CAFile)
	}
	b, err := c.render(role, p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRenderThreeMasters(t *testing.T) {
	ca := newCA(t, "cluster-ca")
	cfg := renderFor(t, newTestComponent(), masterRole(t, 3, ca), "/")

	for _, want := range []string{
		"\n    master-worker\n",
		"\n    pidfile /run/haproxy/haproxy.pid\n",
		"\n    stats socket /run/haproxy/admin.sock mode 600 level admin expose-fd listeners\n",
		"\n    mode tcp\n",
		"\n    timeout connect 250ms\n",
		"\n    option redispatch 1\n",
		"\n    timeout client 4h\n",
		"\n    timeout server 4h\n",
		"\n    timeout tunnel 8h\n",
		"\nfrontend apiserver\n    bind 198.18.0.10:8443\n",
		"ip_nonlocal_bind",
		"\n    default_backend apiservers\n",
		"\nbackend apiservers\n",
		"\n    balance roundrobin\n",
		"\n    option httpchk GET /readyz\n",
		"\n    http-check expect status 200\n",
		"\n    bind 127.0.0.1:8404\n",
		"\n    http-request use-service prometheus-exporter if { path /metrics }\n",
		"\n    stats uri /stats\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "\n    daemon") {
		t.Errorf("config puts HAProxy in daemon mode; the service manager supervises it:\n%s", cfg)
	}
	servers := regexp.MustCompile(`(?m)^\s*server .*$`).FindAllString(cfg, -1)
	want := []string{
		"    server m1 198.18.0.11:6443 check check-ssl verify required ca-file /etc/haproxy/cluster-ca.crt verifyhost kubernetes inter 2s fall 3 rise 2",
		"    server m2 198.18.0.12:6443 check check-ssl verify required ca-file /etc/haproxy/cluster-ca.crt verifyhost kubernetes inter 2s fall 3 rise 2",
		"    server m3 198.18.0.13:6443 check check-ssl verify required ca-file /etc/haproxy/cluster-ca.crt verifyhost kubernetes inter 2s fall 3 rise 2",
	}
	if !slices.Equal(servers, want) {
		t.Errorf("server lines:\n%s\nwant:\n%s", strings.Join(servers, "\n"), strings.Join(want, "\n"))
	}
	for _, worker := range []string{"w1", "w2", "198.18.0.21", "198.18.0.22"} {
		if strings.Contains(cfg, worker) {
			t.Errorf("config names worker %s", worker)
		}
	}
	if strings.Contains(cfg, "PRIVATE KEY") || strings.Contains(cfg, "BEGIN") {
		t.Error("config carries PEM material")
	}
}

func TestRenderRankThenName(t *testing.T) {
	r := masterRole(t, 1, nil)
	r.Peers = []v1.Peer{
		{Name: "zeta", Role: v1.RoleMaster, Address: "198.18.0.14", Rank: 0},
		{Name: "beta", Role: v1.RoleMaster, Address: "198.18.0.13", Rank: 2},
		{Name: "alpha", Role: v1.RoleMaster, Address: "198.18.0.12", Rank: 2},
		{Name: "gamma", Role: v1.RoleMaster, Address: "198.18.0.11", Rank: 1},
	}
	cfg := renderFor(t, newTestComponent(), r, "/")
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s*server (\S+) `).FindAllStringSubmatch(cfg, -1) {
		names = append(names, m[1])
	}
	if want := []string{"zeta", "gamma", "alpha", "beta"}; !slices.Equal(names, want) {
		t.Errorf("servers in order %v, want %v", names, want)
	}
}

func TestRenderWithoutCA(t *testing.T) {
	cfg := renderFor(t, newTestComponent(), masterRole(t, 1, nil), "/")
	if !strings.Contains(cfg, "server m1 198.18.0.11:6443 check check-ssl verify none inter 2s fall 3 rise 2\n") {
		t.Errorf("without a CA the checks should be verify none:\n%s", cfg)
	}
	if strings.Contains(cfg, "ca-file") {
		t.Errorf("config names a CA file it does not have:\n%s", cfg)
	}
}

func TestRenderDeterministic(t *testing.T) {
	c := newTestComponent()
	ca := newCA(t, "cluster-ca")
	a := masterRole(t, 3, ca)
	b := masterRole(t, 3, ca)
	slices.Reverse(b.Peers)
	b.Revision = 7
	first := renderFor(t, c, a, "/")
	for range 5 {
		if again := renderFor(t, c, a, "/"); again != first {
			t.Fatal("rendering the same role twice gave different bytes")
		}
	}
	if other := renderFor(t, c, b, "/"); other != first {
		t.Errorf("the order of peers changed the config:\n%s\nvs\n%s", first, other)
	}
}

func TestFormatDuration(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{4 * time.Hour, "4h"},
		{8 * time.Hour, "8h"},
		{48 * time.Hour, "2d"},
		{90 * time.Minute, "90m"},
		{2 * time.Second, "2s"},
		{1500 * time.Millisecond, "1500ms"},
		{100 * time.Millisecond, "100ms"},
		{time.Hour + time.Second, "3601s"},
		{250*time.Millisecond + 400*time.Microsecond, "250ms"},
	} {
		if got := formatDuration(tc.in); got != tc.want {
			t.Errorf("formatDuration(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Every kind of role renders a config the real HAProxy accepts, without
// warnings.
func TestConfigsPassHAProxyCheck(t *testing.T) {
	needHAProxy(t)
	ca := newCA(t, "cluster-ca")
	cases := []struct {
		name string
		role func() *v1.Role
		want []string
	}{
		{"one master without CA", func() *v1.Role { return masterRole(t, 1, nil) }, []string{"verify none"}},
		{"one master with CA", func() *v1.Role { return masterRole(t, 1, ca) }, []string{"verify required"}},
		{"three masters with CA", func() *v1.Role { return masterRole(t, 3, ca) }, []string{"server m3 198.18.0.13:6443"}},
		{"three masters without CA", func() *v1.Role { return masterRole(t, 3, nil) }, []string{"server m2 198.18.0.12:6443"}},
		{"custom timeouts", func() *v1.Role {
			r := masterRole(t, 3, ca)
			r.Cluster.LoadBalancer = v1.LoadBalancerSettings{
				ClientTimeout: "90m", ServerTimeout: "1h30m0.5s", TunnelTimeout: "168h", CheckInterval: "250ms",
			}
			return r
		}, []string{"timeout client 90m\n", "timeout server 5400500ms\n", "timeout tunnel 7d\n", "inter 250ms fall 3"}},
		// IPv6 syntax, with addresses still in 198.18.0.0/15.
		{"IPv6 VIP and masters", func() *v1.Role {
			r := masterRole(t, 2, ca)
			r.Cluster.VIP = "::ffff:198.18.0.10"
			r.Peers[1].Address, r.Peers[2].Address = "::ffff:198.18.0.12", "::ffff:198.18.0.11"
			return r
		}, []string{"bind [::ffff:198.18.0.10]:8443\n", "server m1 [::ffff:198.18.0.11]:6443 "}},
		{"appliance", func() *v1.Role {
			r := masterRole(t, 3, nil)
			r.Role = v1.RoleAppliance
			for i := range r.Peers {
				r.Peers[i].Role = v1.RoleAppliance
			}
			return r
		}, []string{"server w1 198.18.0.21:6443", "server m1 198.18.0.11:6443"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			role := tc.role()
			if err := role.Validate(); err != nil {
				t.Fatalf("role is not valid: %v", err)
			}
			host := newHost(t, servicetest.New())
			st := newTestComponent().Reconcile(context.Background(), host, role)
			if st.Phase != reconcile.PhaseConverged || !st.Healthy {
				t.Fatalf("status %+v", st)
			}
			cfg, err := os.ReadFile(host.Path(ConfigFile))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(cfg), w) {
					t.Errorf("config lacks %q:\n%s", w, cfg)
				}
			}
			out, err := exec.Command(haproxyBinary, "-c", "-f", host.Path(ConfigFile)).CombinedOutput()
			if err != nil {
				t.Fatalf("haproxy -c: %v\n%s", err, out)
			}
			if bytes.Contains(out, []byte("[WARNING]")) {
				t.Errorf("haproxy -c warns:\n%s\nconfig:\n%s", out, cfg)
			}
		})
	}
}

func TestMissingVIPFails(t *testing.T) {
	rec := servicetest.New()
	host := newHost(t, rec)
	role := masterRole(t, 3, nil)
	role.Cluster.VIP = ""
	st := newTestComponent().Reconcile(context.Background(), host, role)
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "cluster.vip") {
		t.Fatalf("status %+v, want Failed naming cluster.vip", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("manager calls %v", calls)
	}
	if _, err := os.Stat(host.Path(ConfigFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a config was written: %v", err)
	}
}

func TestWorkerIsDisabled(t *testing.T) {
	rec := servicetest.New()
	host := newHost(t, rec)
	c := newTestComponent()
	worker := masterRole(t, 3, nil)
	worker.Role = v1.RoleWorker
	worker.NodeName = "w1"

	st := c.Reconcile(context.Background(), host, worker)
	if st.Phase != reconcile.PhaseDisabled || len(st.Actions) != 0 {
		t.Fatalf("status %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("a worker touched the manager: %v", calls)
	}

	// A master turned worker stops its HAProxy, once.
	if st := c.Reconcile(context.Background(), host, masterRole(t, 3, nil)); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("master: %+v", st)
	}
	rec.TakeCalls()
	st = c.Reconcile(context.Background(), host, worker)
	if st.Phase != reconcile.PhaseDisabled || !slices.Equal(st.Actions, []string{"stopped haproxy"}) {
		t.Fatalf("status %+v", st)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"stop haproxy"}) {
		t.Errorf("calls %v", calls)
	}
	st = c.Reconcile(context.Background(), host, worker)
	if st.Phase != reconcile.PhaseDisabled || len(st.Actions) != 0 {
		t.Fatalf("second worker pass: %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("second worker pass: calls %v", calls)
	}
}

func TestIdempotentThenOneReload(t *testing.T) {
	needHAProxy(t)
	rec := servicetest.New()
	host := newHost(t, rec)
	c := newTestComponent()
	ca := newCA(t, "cluster-ca")
	role := masterRole(t, 3, ca)

	st := c.Reconcile(context.Background(), host, role)
	if st.Phase != reconcile.PhaseConverged {
		t.Fatalf("first pass: %+v", st)
	}
	if want := []string{"wrote " + CAFile, "wrote " + ConfigFile, "started haproxy"}; !slices.Equal(st.Actions, want) {
		t.Errorf("first pass actions %q, want %q", st.Actions, want)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"ensure haproxy"}) {
		t.Errorf("first pass calls %v", calls)
	}
	u, _ := rec.Unit(Name)
	if want := []string{haproxyBinary, "-W", "-db", "-f", host.Path(ConfigFile)}; !slices.Equal(u.Command, want) || u.ReloadSignal == 0 {
		t.Errorf("unit %+v", u)
	}

	// Same role, new revision: nothing to do.
	again := masterRole(t, 3, ca)
	again.Revision = 2
	info, _ := os.Stat(host.Path(ConfigFile))
	st = c.Reconcile(context.Background(), host, again)
	if st.Phase != reconcile.PhaseConverged || len(st.Actions) != 0 {
		t.Fatalf("second pass: %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("second pass changed the service: %v", calls)
	}
	if info2, _ := os.Stat(host.Path(ConfigFile)); !info2.ModTime().Equal(info.ModTime()) {
		t.Error("second pass rewrote the config")
	}

	// A new timeout: the config is rewritten and HAProxy reloaded, once,
	// never restarted.
	changed := masterRole(t, 3, ca)
	changed.Cluster.LoadBalancer.ServerTimeout = "6h"
	st = c.Reconcile(context.Background(), host, changed)
	if want := []string{"wrote " + ConfigFile, "reloaded haproxy"}; st.Phase != reconcile.PhaseConverged || !slices.Equal(st.Actions, want) {
		t.Fatalf("changed pass: %+v, want actions %q", st, want)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"reload haproxy"}) {
		t.Errorf("changed pass calls %v, want exactly one reload", calls)
	}
	if cfg, _ := os.ReadFile(host.Path(ConfigFile)); !bytes.Contains(cfg, []byte("timeout server 6h\n")) {
		t.Errorf("config not updated:\n%s", cfg)
	}
	st = c.Reconcile(context.Background(), host, changed)
	if len(st.Actions) != 0 || len(rec.TakeCalls()) != 0 {
		t.Errorf("pass after the change was not a no-op: %+v", st)
	}
}

// A new cluster CA leaves haproxy.cfg byte-identical, but HAProxy loads the
// CA only when it reads its config, so it still needs a reload.
func TestCAChangeAloneReloads(t *testing.T) {
	needHAProxy(t)
	rec := servicetest.New()
	host := newHost(t, rec)
	c := newTestComponent()
	if st := c.Reconcile(context.Background(), host, masterRole(t, 1, newCA(t, "old-ca"))); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("%+v", st)
	}
	rec.TakeCalls()
	newCA := newCA(t, "new-ca")
	st := c.Reconcile(context.Background(), host, masterRole(t, 1, newCA))
	if want := []string{"wrote " + CAFile, "reloaded haproxy"}; !slices.Equal(st.Actions, want) {
		t.Fatalf("actions %q, want %q (%s)", st.Actions, want, st.Message)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"reload haproxy"}) {
		t.Errorf("calls %v", calls)
	}
	if got, _ := os.ReadFile(host.Path(CAFile)); string(got) != newCA.pair.Certificate {
		t.Error("CA file does not hold the new CA certificate")
	}

	// The CA dropped from the role: checks stop verifying, the file goes.
	st = c.Reconcile(context.Background(), host, masterRole(t, 1, nil))
	if want := []string{"wrote " + ConfigFile, "removed " + CAFile, "reloaded haproxy"}; !slices.Equal(st.Actions, want) {
		t.Fatalf("actions %q, want %q (%s)", st.Actions, want, st.Message)
	}
	if _, err := os.Stat(host.Path(CAFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale CA file: %v", err)
	}
}

// A zoned IPv6 VIP (here IPv4-mapped) passes role validation (net/netip accepts zones) but
// HAProxy cannot bind it: the real checker refuses the candidate, and the
// live files and service stay as they were.
func TestRefusedCandidateKeepsOldConfig(t *testing.T) {
	needHAProxy(t)
	rec := servicetest.New()
	host := newHost(t, rec)
	c := newTestComponent()
	oldCA := newCA(t, "old-ca")
	if st := c.Reconcile(context.Background(), host, masterRole(t, 3, oldCA)); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("%+v", st)
	}
	rec.TakeCalls()
	oldCfg, _ := os.ReadFile(host.Path(ConfigFile))
	oldCAFile, _ := os.ReadFile(host.Path(CAFile))

	for _, tc := range []struct {
		name string
		ca   *testCA
	}{{"config change", oldCA}, {"config and CA change", newCA(t, "new-ca")}} {
		t.Run(tc.name, func(t *testing.T) {
			bad := masterRole(t, 3, tc.ca)
			// Role validation refuses zoned addresses; fed straight in, this
			// one exercises the last line of defence, HAProxy's own check.
			bad.Cluster.VIP = "::ffff:198.18.0.10%harmony0"
			st := c.Reconcile(context.Background(), host, bad)
			if st.Phase != reconcile.PhaseFailed {
				t.Fatalf("status %+v, want Failed", st)
			}
			if !strings.Contains(st.Message, "refused") || !strings.Contains(st.Message, "invalid address") || !strings.Contains(st.Message, "198.18.0.10%harmony0") {
				t.Errorf("message does not carry the checker's words: %q", st.Message)
			}
			if strings.Contains(st.Message, "NOTICE") || strings.Contains(st.Message, ".tmp-") || strings.Contains(st.Message, "\n") {
				t.Errorf("message is not trimmed: %q", st.Message)
			}
			if !st.Healthy {
				t.Error("the old HAProxy still runs; status should say so")
			}
			if len(st.Actions) != 0 {
				t.Errorf("actions %q", st.Actions)
			}
			if calls := rec.TakeCalls(); len(calls) != 0 {
				t.Errorf("the service was touched: %v", calls)
			}
			if got, _ := os.ReadFile(host.Path(ConfigFile)); !bytes.Equal(got, oldCfg) {
				t.Error("the live config changed")
			}
			if got, _ := os.ReadFile(host.Path(CAFile)); !bytes.Equal(got, oldCAFile) {
				t.Error("the live CA file changed")
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(host.Path(ConfigFile)), ".*"))
			if len(left) != 0 {
				t.Errorf("candidates left behind: %v", left)
			}
		})
	}

	// Back to the good role: nothing to do, the old files were kept.
	st := c.Reconcile(context.Background(), host, masterRole(t, 3, oldCA))
	if st.Phase != reconcile.PhaseConverged || len(st.Actions) != 0 {
		t.Errorf("after the refusal: %+v", st)
	}
	if calls := rec.TakeCalls(); len(calls) != 0 {
		t.Errorf("calls %v", calls)
	}
}

// The validator itself, on a file that is not an HAProxy config at all.
func TestCheckRefusesGarbage(t *testing.T) {
	needHAProxy(t)
	c := newTestComponent()
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	err := c.check(context.Background(), writeTemp(t, path, "frontend x\n    bind 198.18.0.10:8443\n    no-such-keyword here\n"))
	if err == nil || !strings.Contains(err.Error(), "no-such-keyword") {
		t.Fatalf("check: %v", err)
	}
}

func writeTemp(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A reload that fails is owed, and paid on the next pass even though the
// files no longer change.
func TestFailedReloadIsRetried(t *testing.T) {
	needHAProxy(t)
	rec := servicetest.New()
	host := newHost(t, rec)
	c := newTestComponent()
	if st := c.Reconcile(context.Background(), host, masterRole(t, 3, nil)); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("%+v", st)
	}
	rec.TakeCalls()
	changed := masterRole(t, 3, nil)
	changed.Cluster.LoadBalancer.CheckInterval = "5s"
	rec.FailNextReload(errors.New("signal: no such process"))
	st := c.Reconcile(context.Background(), host, changed)
	if st.Phase != reconcile.PhaseFailed || !strings.Contains(st.Message, "reload haproxy") {
		t.Fatalf("status %+v", st)
	}
	rec.TakeCalls()
	st = c.Reconcile(context.Background(), host, changed)
	if st.Phase != reconcile.PhaseConverged || !slices.Equal(st.Actions, []string{"reloaded haproxy"}) {
		t.Fatalf("retry: %+v", st)
	}
	if calls := rec.TakeCalls(); !slices.Equal(calls, []string{"reload haproxy"}) {
		t.Errorf("retry calls %v", calls)
	}
	st = c.Reconcile(context.Background(), host, changed)
	if len(st.Actions) != 0 || len(rec.TakeCalls()) != 0 {
		t.Errorf("owed reload paid twice: %+v", st)
	}
}

// A peer name that skipped validation could inject configuration.
func TestRenderRefusesUnsafeNames(t *testing.T) {
	r := masterRole(t, 1, nil)
	r.Peers[1].Name = "m1 backup\n    server evil 198.18.0.99:6443"
	if _, err := newTestComponent().render(r, paths{RunDir: "/run/haproxy"}); err == nil {
		t.Fatal("rendered a peer name with a newline")
	}
}

func TestCheckerMessage(t *testing.T) {
	out := "[NOTICE]   (12319) : haproxy version is 2.6.12-1+deb12u4\n" +
		"[NOTICE]   (12319) : path to executable is /usr/sbin/haproxy\n" +
		"[ALERT]    (12319) : config : parsing [/etc/haproxy/.haproxy.cfg.tmp-42:9] : 'bind' : invalid address: '::ffff:198.18.0.10%x'\n" +
		"[ALERT]    (12319) : config : Error(s) found in configuration file : /etc/haproxy/.haproxy.cfg.tmp-42\n" +
		"[ALERT]    (12319) : config : Fatal errors found in configuration.\n"
	got := checkerMessage([]byte(out), "/etc/haproxy/.haproxy.cfg.tmp-42")
	want := "config : parsing [candidate:9] : 'bind' : invalid address: '::ffff:198.18.0.10%x'"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestMaxConn(t *testing.T) {
	needHAProxy(t)
	role := masterRole(t, 3, nil)
	if cfg := renderFor(t, newTestComponent(), role, "/"); strings.Contains(cfg, "\n    maxconn") {
		t.Errorf("default config fixes maxconn:\n%s", cfg)
	}
	c := New(Config{Binary: haproxyBinary, NoStatsProbe: true, MaxConn: 2000})
	host := newHost(t, servicetest.New())
	if st := c.Reconcile(context.Background(), host, role); st.Phase != reconcile.PhaseConverged {
		t.Fatalf("%+v", st)
	}
	if cfg, _ := os.ReadFile(host.Path(ConfigFile)); !bytes.Contains(cfg, []byte("\n    maxconn 2000\n")) {
		t.Errorf("config lacks maxconn 2000:\n%s", cfg)
	}
}
