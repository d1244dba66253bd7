package etcd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/harmonykaas/harmony/agent/files"
	"github.com/harmonykaas/harmony/agent/service"
	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// Paths on the node (under reconcile.Host.Path).
const (
	// PKIDir holds the CA certificate and the member's certificates.
	PKIDir = "/etc/harmony/etcd/pki"
	// stateDir holds what the agent must remember about the member.
	stateDir = "/var/lib/harmony/etcd"
	// BootstrapFile records how the member's data directory was started
	// (new cluster or join); see Bootstrap.
	BootstrapFile = stateDir + "/bootstrap.json"
)

// Files under PKIDir.
const (
	caFile     = "ca.crt"
	serverCert = "server.crt"
	serverKey  = "server.key"
	peerCert   = "peer.crt"
	peerKey    = "peer.key"
	clientCert = "client.crt"
	clientKey  = "client.key"
)

// Initial-cluster states.
const (
	StateNew      = "new"
	StateExisting = "existing"
)

// Bootstrap is how a data directory was first started: the
// --initial-cluster and --initial-cluster-state etcd was given. etcd reads
// them only while its data directory is empty, but they are flags of the
// unit, and a changed unit is a restarted etcd. So they are chosen once,
// when the member bootstraps or joins, and recorded in BootstrapFile;
// every later pass builds the unit from the record, not from the role, and
// a role that changes the peers (a new worker, a replaced master) restarts
// nothing.
type Bootstrap struct {
	State string `json:"state"`
	// InitialCluster is name=peerURL,... as etcd takes it.
	InitialCluster string `json:"initialCluster"`
}

var initialClusterPattern = lazyregexp.New(`^[a-z0-9.-]{1,253}=https://[0-9a-fA-F.:\[\]]+:[0-9]{1,5}$`)

// check validates a record, which is outside input once it is on disk.
func (b Bootstrap) check() error {
	if b.State != StateNew && b.State != StateExisting {
		return fmt.Errorf("state %q is neither %q nor %q", truncate(b.State), StateNew, StateExisting)
	}
	entries := strings.Split(b.InitialCluster, ",")
	if b.InitialCluster == "" || len(entries) > maxMembers {
		return fmt.Errorf("initialCluster has %d entries", len(entries))
	}
	for _, e := range entries {
		if !initialClusterPattern.MatchString(e) {
			return fmt.Errorf("initialCluster entry %q is not name=https://address:port", truncate(e))
		}
	}
	return nil
}

// restartBootstrap is what a member whose data directory already holds its
// state is given when no record says otherwise (a reimaged node whose data
// disk moved across). etcd ignores it then; and should the directory turn
// out empty after all, "existing" with no other member makes etcd refuse to
// start rather than found a cluster of its own.
func restartBootstrap(s settings, peerPort int) Bootstrap {
	return Bootstrap{State: StateExisting, InitialCluster: s.name + "=" + peerURL(s.ip, peerPort)}
}

// newClusterBootstrap founds a cluster of every member of the role.
func newClusterBootstrap(s settings, peerPort int) Bootstrap {
	entries := make([]string, 0, len(s.members))
	for _, m := range s.members {
		entries = append(entries, m.Name+"="+peerURL(netip.MustParseAddr(m.Address), peerPort))
	}
	return Bootstrap{State: StateNew, InitialCluster: strings.Join(entries, ",")}
}

// joinBootstrap joins the cluster whose members (this one, just added,
// included) are given. etcd matches these entries with the cluster's
// members by peer URL, so every member must be there; a member that never
// started has no name yet and gets a stand-in.
func joinBootstrap(s settings, self uint64, members []Member) (Bootstrap, error) {
	var entries []string
	for _, m := range members {
		name := m.Name
		if m.ID == self {
			name = s.name
		} else if !initialClusterName.MatchString(name) {
			name = fmt.Sprintf("member-%x", m.ID)
		}
		for _, u := range m.PeerURLs {
			entries = append(entries, name+"="+u)
		}
	}
	b := Bootstrap{State: StateExisting, InitialCluster: strings.Join(entries, ",")}
	if err := b.check(); err != nil {
		return Bootstrap{}, fmt.Errorf("initial cluster from the member list: %w", err)
	}
	return b, nil
}

var initialClusterName = lazyregexp.New(`^[a-z0-9.-]{1,253}$`)

// readBootstrap returns the record, or ok=false when there is none or it
// cannot be used.
func readBootstrap(path string) (b Bootstrap, ok bool, err error) {
	found, err := readRecord(path, &b)
	if err != nil || !found {
		return Bootstrap{}, false, err
	}
	if err := b.check(); err != nil {
		return Bootstrap{}, false, fmt.Errorf("%s: %w", BootstrapFile, err)
	}
	return b, true, nil
}

// readRecord decodes one of the component's own JSON records, strictly
// (it is outside input once it is on disk) and bounded; found is false
// when there is none.
func readRecord(path string, v any) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxResponseBytes {
		return false, fmt.Errorf("%s is larger than %d bytes", path, maxResponseBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

func writeBootstrap(path string, b Bootstrap) (bool, error) {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return false, err
	}
	return files.Write(path, append(data, '\n'), 0o644, nil)
}

func peerURL(ip netip.Addr, port int) string {
	return "https://" + netip.AddrPortFrom(ip, uint16(port)).String()
}

func clientURL(ip netip.Addr, port int) string { return peerURL(ip, port) }

// localClientURL is where the agent asks the member on its own host.
func (c *Component) localClientURL() string {
	return clientURL(netip.AddrFrom4([4]byte{127, 0, 0, 1}), c.cfg.ClientPort)
}

// unitParams are the inputs of the unit definition.
type unitParams struct {
	Binary string
	Name   string
	IP     netip.Addr
	// DataDir and PKIDir are paths as the process sees them (under the
	// host root).
	DataDir     string
	PKIDir      string
	ClientPort  int
	PeerPort    int
	MetricsPort int
	Token       string
	Bootstrap   Bootstrap
}

// Unit renders etcd's service unit. Everything in it follows from the
// node's own identity and the bootstrap record, never from the other
// peers, so that only a change of this member restarts it.
func Unit(p unitParams) service.Unit {
	loopback := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	pkiFile := func(name string) string { return p.PKIDir + "/" + name }
	return service.Unit{
		Name: UnitName,
		Command: []string{
			p.Binary,
			"--name=" + p.Name,
			"--data-dir=" + p.DataDir,
			// Other members' clients (kube-apiserver, the controller) are
			// given the advertised URL only: advertising the loopback one
			// would send them to themselves.
			"--listen-client-urls=" + clientURL(p.IP, p.ClientPort) + "," + clientURL(loopback, p.ClientPort),
			"--advertise-client-urls=" + clientURL(p.IP, p.ClientPort),
			"--listen-peer-urls=" + peerURL(p.IP, p.PeerPort),
			"--initial-advertise-peer-urls=" + peerURL(p.IP, p.PeerPort),
			"--initial-cluster=" + p.Bootstrap.InitialCluster,
			"--initial-cluster-state=" + p.Bootstrap.State,
			"--initial-cluster-token=" + p.Token,
			"--cert-file=" + pkiFile(serverCert),
			"--key-file=" + pkiFile(serverKey),
			"--client-cert-auth",
			"--trusted-ca-file=" + pkiFile(caFile),
			"--peer-cert-file=" + pkiFile(peerCert),
			"--peer-key-file=" + pkiFile(peerKey),
			"--peer-client-cert-auth",
			"--peer-trusted-ca-file=" + pkiFile(caFile),
			// Plain HTTP, loopback only: Prometheus gets it through the
			// agent, and /health there needs no client certificate.
			"--listen-metrics-urls=http://" + netip.AddrPortFrom(loopback, uint16(p.MetricsPort)).String(),
			"--snapshot-count=10000",
			// Contiv 1.2 speaks only etcd's v2 API (through the CNI
			// component's v2 proxy); Kubernetes uses v3.
			"--enable-v2=true",
			"--logger=zap",
			"--log-outputs=stderr",
		},
		// etcd has no reload: SIGHUP would end it. Reload (a changed CA)
		// is a restart; renewed leaf certificates need neither, as etcd
		// reads them on every new TLS handshake.
		ReloadSignal: 0,
	}
}

// ClientCredentials are the paths on a master of the etcd CA and of the
// client certificate and key the agent presents to the members: what
// etcdctl on the node needs (--cacert, --cert, --key).
func ClientCredentials() (ca, cert, key string) {
	return PKIDir + "/" + caFile, PKIDir + "/" + clientCert, PKIDir + "/" + clientKey
}
