package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/types"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// A VM that was off, or a controller that was down, for longer than a
// node certificate lives leaves an agent that can no longer renew. The
// engine writes a new one-time bootstrap into the guestinfo of each
// running VM whose node's certificate has expired, once, with a Warning,
// and the node enrolls again with it. A powered-off VM gets none until
// it runs again; a node that never enrolled, none at all.
func TestExpiredAgentCertificateGetsANewBootstrap(t *testing.T) {
	// Long enough that the renewed certificate outlives the checks
	// after the second enrollment on a loaded machine.
	const lifetime = 10 * time.Second
	e := newClusterEnv(t, func(c *Config) { c.CertLifetime = lifetime; c.ClusterResync = 300 * time.Millisecond })
	e.do("POST", v1.PathClusters, e.spec("demo", 1, 2))
	bootstrapOf := func(name string) string { return extraConfig(e.vms("demo")[name], v1.GuestinfoKey) }
	first := map[string]string{}
	for _, name := range []string{"demo-m1", "demo-w1", "demo-w2"} {
		if first[name] = bootstrapOf(name); first[name] == "" {
			t.Fatalf("%s has no bootstrap in its guestinfo", name)
		}
	}
	// demo-w2 is off before its certificate is issued, so that it can
	// never expire while the VM runs.
	w2 := e.vms("demo")["demo-w2"].Self
	e.powerOff(w2)
	e.enrollClusterNode("demo", "demo-w2")
	e.enrollClusterNode("demo", "demo-w1")
	expiry := e.node("demo-w1").CertificateNotAfter

	waitFor(t, "a new bootstrap in demo-w1's guestinfo", func() bool { return bootstrapOf("demo-w1") != first["demo-w1"] })
	if time.Now().Before(expiry) {
		t.Errorf("a new bootstrap was written before the certificate expired at %s", expiry)
	}
	if ev := e.event("demo", "demo-w1", "certificate expired"); ev.Type != "Warning" || ev.Reason != "Rebootstrap" {
		t.Errorf("event %+v", ev)
	}
	// Until the agent uses it, the token stays: passes go on (a few in
	// this second) and write no other.
	written := bootstrapOf("demo-w1")
	time.Sleep(time.Second)
	if bootstrapOf("demo-w1") != written {
		t.Error("the new bootstrap was replaced before the agent could use it")
	}
	// The old token is spent; the new one enrolls the node again, and no
	// other is written while its certificate is valid.
	if r, _ := e.enrollWith("demo-w1", first["demo-w1"]); r.status < 400 || !strings.Contains(string(r.body), "token_used") {
		t.Errorf("the first token enrolled again: %d %s", r.status, r.body)
	}
	renewed := time.Now()
	e.enrollClusterNode("demo", "demo-w1")
	second := bootstrapOf("demo-w1")
	time.Sleep(lifetime / 3)
	if got := bootstrapOf("demo-w1"); got != second {
		t.Error("another bootstrap was written after the node enrolled again")
	}
	if n := e.node("demo-w1"); !n.CertificateNotAfter.After(renewed) {
		t.Errorf("demo-w1's certificate after the new enrollment: valid until %s", n.CertificateNotAfter)
	}

	if got := bootstrapOf("demo-w2"); got != first["demo-w2"] {
		t.Error("a powered-off VM got a new bootstrap")
	}
	if got := bootstrapOf("demo-m1"); got != first["demo-m1"] {
		t.Error("a node that never enrolled got a new bootstrap")
	}
	task, err := object.NewVirtualMachine(e.vc.Client, w2).PowerOn(context.Background())
	if err == nil {
		err = task.Wait(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new bootstrap in demo-w2's guestinfo once it runs", func() bool { return bootstrapOf("demo-w2") != first["demo-w2"] })
	e.enrollClusterNode("demo", "demo-w2")
	if power := e.vms("demo")["demo-w2"].Runtime.PowerState; power != types.VirtualMachinePowerStatePoweredOn {
		t.Errorf("demo-w2 is %s", power)
	}
}
