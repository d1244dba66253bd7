package staticnet_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harmonykaas/harmony/agent/staticnet"
)

// networkdScript runs the real systemd-networkd on the rendered file, in
// a private network and mount namespace (unshare). /sys is mounted
// read-only there, which networkd takes for a container: it configures
// links without waiting for udev, which does not run here. The gateway
// is the peer of eth0, in a second namespace. Only the namespace's own
// /run, /sys and /etc/systemd/network are replaced; nothing on the host
// changes.
//
// It prints what the test checks: how long systemd-networkd-wait-online
// took, eth0's addresses and the default route, and then, for links that
// appear later (the lab's host0, a vSphere-like ens192, and what
// Kubernetes adds: a CNI bridge and a pod veth), the .network file
// networkd chose for each.
const networkdScript = `set -eu
mount --make-rprivate /
mount -t sysfs -o ro sysfs /sys
mount -t tmpfs tmpfs /run
mount --bind "$NETDIR" /etc/systemd/network
install -d -o systemd-network -g systemd-network /run/systemd/netif /run/systemd/netif/links /run/systemd/netif/leases /run/systemd/netif/lldp
ip link set lo up
ip netns add gw
ip link add eth0 type veth peer name peer0 netns gw
ip -n gw addr add 198.18.10.1/24 dev peer0
ip -n gw link set peer0 up
"$NETWORKD" >"$LOG" 2>&1 &
pid=$!
trap 'kill $pid' EXIT
start=$(date +%s%N)
rc=0
"$WAIT_ONLINE" --timeout=30 || rc=$?
echo "wait-online rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))"
ip -4 -o addr show dev eth0
ip -4 route show default
ip link add host0 type veth peer name peer1 netns gw
ip link add ens192 type veth peer name peer3 netns gw
ip link add cni0 type bridge
ip link add veth9f3ac2 type veth peer name peer2 netns gw
for l in eth0 host0 ens192 cni0 veth9f3ac2; do
	idx=$(cat /sys/class/net/$l/ifindex)
	i=0
	while ! grep -q '^NETWORK_FILE=' /run/systemd/netif/links/$idx 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.1; i=$((i+1))
	done
	echo "link $l $(grep '^NETWORK_FILE=' /run/systemd/netif/links/$idx || echo NETWORK_FILE=none)"
done
grep '^DNS=' /run/systemd/netif/links/$(cat /sys/class/net/eth0/ifindex)
`

// TestNetworkdAppliesFile proves that systemd-networkd applies the file
// Render writes, ahead of the image's DHCP file, and that
// systemd-networkd-wait-online does not hold the boot once it has. It
// needs root, unshare, ip and systemd-networkd.
func TestNetworkdAppliesFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	tools := map[string]string{}
	for _, name := range []string{"unshare", "ip", "/lib/systemd/systemd-networkd", "/lib/systemd/systemd-networkd-wait-online"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("no %s: %v", name, err)
		}
		tools[filepath.Base(name)] = p
	}
	if err := exec.Command("id", "systemd-network").Run(); err != nil {
		t.Skip("no systemd-network user")
	}

	dir := t.TempDir()
	netdir := filepath.Join(dir, "network")
	if err := os.Mkdir(netdir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := validConfig()
	unit, err := staticnet.Render(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(netdir, filepath.Base(staticnet.NetworkFile)), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	dhcp, err := os.ReadFile("../../images/rootfs/etc/systemd/network/80-harmony-dhcp.network")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(netdir, "80-harmony-dhcp.network"), dhcp, 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "networkd.log")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tools["unshare"], "--net", "--mount", "sh", "-c", networkdScript)
	cmd.Env = append(os.Environ(), "NETDIR="+netdir, "LOG="+logFile,
		"NETWORKD="+tools["systemd-networkd"], "WAIT_ONLINE="+tools["systemd-networkd-wait-online"])
	outBytes, err := cmd.CombinedOutput()
	out := string(outBytes)
	logData, _ := os.ReadFile(logFile)
	t.Logf("script output:\n%s", out)
	if err != nil {
		t.Fatalf("script: %v\nnetworkd log:\n%s", err, logData)
	}

	// networkd parsed the file without a complaint about it.
	for _, line := range strings.Split(string(logData), "\n") {
		if strings.Contains(line, "10-harmony-static.network") && regexp.MustCompile(`(?i)unknown|invalid|failed|ignoring`).MatchString(line) {
			t.Errorf("networkd: %s", line)
		}
	}

	m := regexp.MustCompile(`wait-online rc=(\d+) ms=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no wait-online result")
	}
	if ms, _ := strconv.Atoi(m[2]); m[1] != "0" || ms > 10000 {
		t.Errorf("systemd-networkd-wait-online: rc %s after %s ms; want 0 well before its timeout", m[1], m[2])
	}
	if !strings.Contains(out, "eth0    inet "+cfg.Address) {
		t.Errorf("eth0 lacks %s", cfg.Address)
	}
	if !strings.Contains(out, "default via "+cfg.Gateway+" dev eth0") {
		t.Errorf("no default route via %s", cfg.Gateway)
	}
	if !strings.Contains(out, "DNS="+strings.Join(cfg.DNS, " ")) {
		t.Errorf("networkd did not take the DNS servers")
	}
	static := "NETWORK_FILE=/etc/systemd/network/10-harmony-static.network"
	for link, wantStatic := range map[string]bool{
		"eth0": true, "host0": true, "ens192": true, // the NIC: lab, lab, vSphere
		"cni0": false, "veth9f3ac2": false, // Kubernetes' links
	} {
		line := regexp.MustCompile(`(?m)^link ` + regexp.QuoteMeta(link) + ` (.*)$`).FindStringSubmatch(out)
		if line == nil {
			t.Errorf("%s: not reported", link)
			continue
		}
		if got := line[1] == static; got != wantStatic {
			t.Errorf("%s: %s; want the static file: %v", link, line[1], wantStatic)
		}
	}
}
