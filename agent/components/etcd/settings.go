package etcd

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/agent/pki"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// DefaultDataDir is where the member keeps its data when the role names no
// directory: on the node's data disk.
const DefaultDataDir = "/var/lib/etcd"

// settings are what the component takes from the role, validated.
type settings struct {
	name string
	ip   netip.Addr
	// token is --initial-cluster-token: the cluster's name, so that two
	// clusters bootstrapped from the same addresses get different IDs.
	token string
	// dataDir is a path of the node (not yet under the host root).
	dataDir string
	// dataDisk: dataDir must be a mount point (the data disk).
	dataDisk bool
	// members are the peers with this node's role (masters, or
	// appliances), this node included, sorted by name: the initial
	// cluster.
	members []v1.Peer
	ca      *pki.CA
	// snapshots is when the member snapshots the keyspace; snapshotSince
	// asks for one since then (zero: none asked).
	snapshots     v1.EtcdSnapshotSchedule
	snapshotSince time.Time
	// restore is the restore the role asks for; nil: none.
	restore *v1.EtcdRestore
	// lost are the members of masters the cluster removed without their
	// leaving it, to remove (etcd.removeMembers).
	lost []uint64
}

// fieldError names the role field that is wrong.
type fieldError struct {
	field, problem string
}

func (e *fieldError) Error() string { return e.field + ": " + e.problem }

func fieldErr(field, format string, args ...any) error {
	return &fieldError{field: field, problem: fmt.Sprintf(format, args...)}
}

// settingsFrom validates what the component needs from role. It reads the
// role only: the node is not touched, so a bad role leaves the running
// member alone.
func settingsFrom(role *v1.Role) (settings, error) {
	s := settings{name: role.NodeName, token: role.Cluster.Name, dataDir: DefaultDataDir}
	if err := v1.ValidateNodeName(role.NodeName); err != nil {
		return s, fieldErr("nodeName", "%v", err)
	}
	if s.token == "" || strings.ContainsAny(s.token, " \t\n,=") || !printable(s.token) || len(s.token) > 63 {
		return s, fieldErr("cluster.name", "%q cannot be the etcd cluster token (want a DNS label)", truncate(s.token))
	}
	if role.Etcd != nil && role.Etcd.DataDir != "" {
		d := role.Etcd.DataDir
		if !path.IsAbs(d) || path.Clean(d) != d || d == "/" {
			return s, fieldErr("etcd.dataDir", "must be a clean absolute path other than /, got %q", truncate(d))
		}
		for _, own := range []string{"/etc", "/etc/harmony", PKIDir, stateDir, "/var/lib/harmony"} {
			if d == own || strings.HasPrefix(own, d+"/") {
				return s, fieldErr("etcd.dataDir", "%q would hold the agent's own files (%s)", d, own)
			}
		}
		s.dataDir = d
	}
	s.dataDisk = role.Etcd != nil && role.Etcd.DataDisk
	var snapshots *v1.EtcdSnapshots
	if role.Etcd != nil {
		snapshots, s.snapshotSince = role.Etcd.Snapshots, role.Etcd.SnapshotSince
	}
	sched, err := snapshots.Schedule()
	if err != nil {
		return s, err
	}
	s.snapshots = sched
	self := -1
	seenAddr := map[netip.Addr]string{}
	for i, p := range role.Peers {
		if p.Role != role.Role {
			continue
		}
		f := "peers[" + strconv.Itoa(i) + "]"
		if err := v1.ValidateNodeName(p.Name); err != nil {
			return s, fieldErr(f+".name", "%v", err)
		}
		a, err := netip.ParseAddr(p.Address)
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
			return s, fieldErr(f+".address", "%q is not a unicast IP address without a zone", truncate(p.Address))
		}
		a = a.Unmap()
		if other, dup := seenAddr[a]; dup {
			return s, fieldErr(f+".address", "%s is also the address of %s; etcd members need their own", a, other)
		}
		seenAddr[a] = p.Name
		if slices.ContainsFunc(s.members, func(m v1.Peer) bool { return m.Name == p.Name }) {
			return s, fieldErr(f+".name", "%q appears twice", p.Name)
		}
		p.Address = a.String()
		s.members = append(s.members, p)
		if p.Name == role.NodeName {
			self = i
			s.ip = a
		}
	}
	if self < 0 {
		return s, fieldErr("peers", "node %s is not among the role's %s peers", role.NodeName, role.Role)
	}
	if role.Etcd != nil && role.Etcd.Restore != nil {
		r := *role.Etcd.Restore
		if err := v1.ValidateRestoreID(r.ID); err != nil {
			return s, fieldErr("etcd.restore.id", "%v", err)
		}
		if !slices.ContainsFunc(s.members, func(p v1.Peer) bool { return p.Name == r.Source }) {
			return s, fieldErr("etcd.restore.source", "%q is not one of the role's %s peers", truncate(r.Source), role.Role)
		}
		s.restore = &r
	}
	slices.SortFunc(s.members, func(a, b v1.Peer) int { return strings.Compare(a.Name, b.Name) })
	if role.Etcd != nil {
		if s.lost, err = role.Etcd.RemoveMemberIDs(); err != nil {
			return s, err
		}
	}

	if role.PKI == nil || role.PKI.EtcdCA == nil {
		return s, fieldErr("pki.etcdCA", "missing: an etcd member needs the cluster's etcd CA")
	}
	if role.PKI.EtcdCA.Key == "" {
		return s, fieldErr("pki.etcdCA.key", "missing: the member signs its own certificates with it")
	}
	ca, err := pki.LoadCA(role.PKI.EtcdCA)
	if err != nil {
		return s, fieldErr("pki.etcdCA", "%v", err)
	}
	if !ca.Cert.IsCA {
		return s, fieldErr("pki.etcdCA.certificate", "is not a CA certificate")
	}
	s.ca = ca
	return s, nil
}

// others are the members other than this node.
func (s settings) others() []v1.Peer {
	return slices.DeleteFunc(slices.Clone(s.members), func(p v1.Peer) bool { return p.Name == s.name })
}

// peerOf names the role's peer that member m is, by name or peer URL;
// empty if none.
func (s settings) peerOf(m Member, peerPort int) string {
	for _, p := range s.members {
		if m.Name == p.Name || slices.Contains(m.PeerURLs, peerURL(netip.MustParseAddr(p.Address), peerPort)) {
			return p.Name
		}
	}
	return ""
}

// Config errors are the component's own, not the role's.
func (c Config) check() error {
	var errs []error
	for _, p := range []struct {
		name string
		port int
	}{{"ClientPort", c.ClientPort}, {"PeerPort", c.PeerPort}, {"MetricsPort", c.MetricsPort}} {
		if p.port < 1 || p.port > 65535 {
			errs = append(errs, fmt.Errorf("etcd component: %s %d is not a TCP port", p.name, p.port))
		}
	}
	if c.ClientPort == c.PeerPort || c.ClientPort == c.MetricsPort || c.PeerPort == c.MetricsPort {
		errs = append(errs, fmt.Errorf("etcd component: ClientPort, PeerPort and MetricsPort must differ"))
	}
	if !path.IsAbs(c.Binary) {
		errs = append(errs, fmt.Errorf("etcd component: Binary %q is not an absolute path", c.Binary))
	}
	if !path.IsAbs(c.Etcdctl) {
		errs = append(errs, fmt.Errorf("etcd component: Etcdctl %q is not an absolute path", c.Etcdctl))
	}
	return errors.Join(errs...)
}
