package etcd

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

func TestUnitFlags(t *testing.T) {
	u := Unit(unitParams{
		Binary: "/usr/bin/etcd", Name: "m1", IP: netip.MustParseAddr("198.18.0.11"),
		DataDir: "/root/var/lib/etcd", PKIDir: "/root/etc/harmony/etcd/pki",
		ClientPort: 2379, PeerPort: 2380, MetricsPort: 2381, Token: "demo",
		Bootstrap: Bootstrap{State: StateNew, InitialCluster: "m1=https://198.18.0.11:2380,m2=https://198.18.0.12:2380"},
	})
	want := []string{
		"/usr/bin/etcd",
		"--name=m1",
		"--data-dir=/root/var/lib/etcd",
		"--listen-client-urls=https://198.18.0.11:2379,https://127.0.0.1:2379",
		"--advertise-client-urls=https://198.18.0.11:2379",
		"--listen-peer-urls=https://198.18.0.11:2380",
		"--initial-advertise-peer-urls=https://198.18.0.11:2380",
		"--initial-cluster=m1=https://198.18.0.11:2380,m2=https://198.18.0.12:2380",
		"--initial-cluster-state=new",
		"--initial-cluster-token=demo",
		"--cert-file=/root/etc/harmony/etcd/pki/server.crt",
		"--key-file=/root/etc/harmony/etcd/pki/server.key",
		"--client-cert-auth",
		"--trusted-ca-file=/root/etc/harmony/etcd/pki/ca.crt",
		"--peer-cert-file=/root/etc/harmony/etcd/pki/peer.crt",
		"--peer-key-file=/root/etc/harmony/etcd/pki/peer.key",
		"--peer-client-cert-auth",
		"--peer-trusted-ca-file=/root/etc/harmony/etcd/pki/ca.crt",
		"--listen-metrics-urls=http://127.0.0.1:2381",
		"--snapshot-count=10000",
		"--enable-v2=true",
		"--logger=zap",
		"--log-outputs=stderr",
	}
	if !slices.Equal(u.Command, want) {
		t.Errorf("command:\n%s\nwant:\n%s", strings.Join(u.Command, "\n"), strings.Join(want, "\n"))
	}
	if u.Name != "etcd" || u.ReloadSignal != 0 || len(u.Env) != 0 {
		t.Errorf("unit %+v", u)
	}

	// IPv6 addresses are bracketed in URLs.
	u = Unit(unitParams{Binary: "/usr/bin/etcd", Name: "m1", IP: netip.MustParseAddr("2001:db8::11"),
		ClientPort: 2379, PeerPort: 2380, MetricsPort: 2381, Token: "demo",
		Bootstrap: Bootstrap{State: StateExisting, InitialCluster: "m1=https://[2001:db8::11]:2380"}})
	if !slices.Contains(u.Command, "--listen-peer-urls=https://[2001:db8::11]:2380") ||
		!slices.Contains(u.Command, "--listen-client-urls=https://[2001:db8::11]:2379,https://127.0.0.1:2379") {
		t.Errorf("IPv6 command %q", u.Command)
	}
}

func TestBootstraps(t *testing.T) {
	s := settings{name: "m2", ip: netip.MustParseAddr("198.18.0.12"), members: []v1.Peer{
		{Name: "m1", Address: "198.18.0.11"}, {Name: "m2", Address: "198.18.0.12"}, {Name: "m3", Address: "198.18.0.13"},
	}}
	if b := newClusterBootstrap(s, 2380); b.State != StateNew ||
		b.InitialCluster != "m1=https://198.18.0.11:2380,m2=https://198.18.0.12:2380,m3=https://198.18.0.13:2380" {
		t.Errorf("new cluster %+v", b)
	}
	if b := restartBootstrap(s, 2380); b.State != StateExisting || b.InitialCluster != "m2=https://198.18.0.12:2380" {
		t.Errorf("restart %+v", b)
	}
	// The member just added has no name yet and is this node; one that
	// never started gets a stand-in name; every peer URL is listed.
	b, err := joinBootstrap(s, 9, []Member{
		{ID: 1, Name: "m1", PeerURLs: []string{"https://198.18.0.11:2380"}},
		{ID: 9, PeerURLs: []string{"https://198.18.0.12:2380"}, IsLearner: true},
		{ID: 0xab, PeerURLs: []string{"https://198.18.0.13:2380"}},
	})
	if err != nil || b.State != StateExisting ||
		b.InitialCluster != "m1=https://198.18.0.11:2380,m2=https://198.18.0.12:2380,member-ab=https://198.18.0.13:2380" {
		t.Errorf("join %+v, %v", b, err)
	}
	if _, err := joinBootstrap(s, 9, []Member{{ID: 9, PeerURLs: []string{"http://198.18.0.12:2380"}}}); err == nil {
		t.Error("a plain-HTTP peer URL was accepted into the initial cluster")
	}
}

// The bootstrap record is read back from disk, so it is checked.
func TestBootstrapRecord(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bootstrap.json")
	if _, ok, err := readBootstrap(path); ok || err != nil {
		t.Errorf("missing record: ok=%v err=%v", ok, err)
	}
	want := Bootstrap{State: StateNew, InitialCluster: "m1=https://198.18.0.11:2380"}
	if changed, err := writeBootstrap(path, want); !changed || err != nil {
		t.Fatalf("write: %v %v", changed, err)
	}
	if changed, err := writeBootstrap(path, want); changed || err != nil {
		t.Errorf("rewrite of the same record: %v %v", changed, err)
	}
	if got, ok, err := readBootstrap(path); !ok || err != nil || got != want {
		t.Errorf("read %+v %v %v", got, ok, err)
	}
	for _, bad := range []string{
		`{"state":"bootstrap","initialCluster":"m1=https://198.18.0.11:2380"}`,
		`{"state":"new","initialCluster":""}`,
		`{"state":"new","initialCluster":"m1=https://198.18.0.11:2380,--foo"}`,
		`{"state":"new","initialCluster":"m1=http://198.18.0.11:2380"}`,
		`{"state":"new","initialCluster":"m1=https://198.18.0.11:2380","extra":1}`,
		`{"state":`,
	} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := readBootstrap(path); ok || err == nil {
			t.Errorf("record %s accepted", bad)
		}
	}
}
