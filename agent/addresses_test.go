//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/harmonykaas/harmony/api/v1"
	"github.com/harmonykaas/harmony/internal/testutil"
)

// addressesIn runs a.addresses on a thread inside ns, as the agent runs in
// its VM's namespace.
func addressesIn(t *testing.T, a *Agent, ns string) []net.IP {
	t.Helper()
	got := make(chan []net.IP, 1)
	go func() {
		if err := testutil.EnterNetns(ns); err != nil {
			t.Error(err)
			got <- nil
			return
		}
		got <- a.addresses(context.Background())
	}()
	select {
	case ips := <-got:
		return ips
	case <-time.After(2 * time.Minute):
		t.Fatal("addresses did not return")
		return nil
	}
}

func newAddressAgent(t *testing.T, wait time.Duration) *Agent {
	t.Helper()
	a, err := New(Config{StateDir: t.TempDir(), AddressWait: wait, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The agent starts beside the network, not after it: enrollment waits
// until the primary interface has its address, so that the certificate
// carries it.
func TestCertificateAddressesWaitForThePrimaryAddress(t *testing.T) {
	ns := testutil.VethNetns(t, "addr")
	a := newAddressAgent(t, time.Minute)
	go func() {
		time.Sleep(500 * time.Millisecond)
		// Not testutil.IP: t.Fatal belongs to the test's goroutine.
		if out, err := exec.Command("ip", "-n", ns, "addr", "add", "198.18.30.2/24", "dev", "eth0").CombinedOutput(); err != nil {
			t.Errorf("add the address: %v: %s", err, out)
		}
	}()
	ips := addressesIn(t, a, ns)
	if len(ips) != 1 || !ips[0].Equal(net.ParseIP("198.18.30.2")) {
		t.Fatalf("certificate addresses %v, want the address that came after the agent started, 198.18.30.2", ips)
	}
}

// Without an address the wait ends at AddressWait, and enrollment goes on
// without IP SANs, as it did before the agent waited.
func TestCertificateAddressesGiveUpAfterTheWait(t *testing.T) {
	ns := testutil.VethNetns(t, "noaddr")
	a := newAddressAgent(t, 300*time.Millisecond)
	if ips := addressesIn(t, a, ns); ips != nil {
		t.Fatalf("certificate addresses %v in a namespace without any", ips)
	}
	a.cfg.Addresses = []string{"198.18.30.9"}
	if ips := addressesIn(t, a, ns); len(ips) != 1 || !ips[0].Equal(net.ParseIP("198.18.30.9")) {
		t.Fatalf("configured addresses came back as %v", ips)
	}
}

// A master whose keepalived holds the API VIP enrolls again (a new token
// after an outage that outlasted its certificate) without naming the VIP:
// it is the cluster's address, in no node's inventory, and a CSR with it
// is refused along with the token.
func TestCertificateAddressesLeaveOutTheVIP(t *testing.T) {
	ns := testutil.VethNetns(t, "vip")
	for _, a := range []string{"198.18.30.2/24", "198.18.30.10/32"} {
		if out, err := exec.Command("ip", "-n", ns, "addr", "add", a, "dev", "eth0").CombinedOutput(); err != nil {
			t.Fatalf("add %s: %v: %s", a, err, out)
		}
	}
	a := newAddressAgent(t, time.Minute)
	role := v1.Role{APIVersion: v1.APIVersion, Kind: "Role", Revision: 3, Cluster: v1.ClusterSettings{Name: "c", VIP: "198.18.30.10"}}
	data, err := json.Marshal(role)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.cfg.StateDir, RoleFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	ips := addressesIn(t, a, ns)
	if len(ips) != 1 || !ips[0].Equal(net.ParseIP("198.18.30.2")) {
		t.Fatalf("certificate addresses %v, want only the node's own 198.18.30.2", ips)
	}
}
