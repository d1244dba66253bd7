package v1

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// NodeRole is what a machine is.
type NodeRole string

const (
	RoleAppliance NodeRole = "appliance"
	RoleMaster    NodeRole = "master"
	RoleWorker    NodeRole = "worker"
)

// Valid reports whether r is one of the known roles.
func (r NodeRole) Valid() bool {
	return r == RoleAppliance || r == RoleMaster || r == RoleWorker
}

// Role is the one document that says what a machine is. The controller
// owns Revision and UpdatedAt; values sent in are ignored.
type Role struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	NodeName   string    `json:"nodeName"`
	Revision   int64     `json:"revision"`
	UpdatedAt  time.Time `json:"updatedAt,omitzero"`
	Role       NodeRole  `json:"role"`
	// ProviderID is the node's Kubernetes provider ID,
	// vsphere://<the VM's BIOS UUID>, which the kubelet registers so that
	// a vSphere cloud provider or CSI driver finds the node's VM.
	ProviderID string `json:"providerID,omitempty"`

	Cluster   ClusterSettings `json:"cluster"`
	Addresses NodeAddresses   `json:"addresses"`
	// Peers lists every node of the cluster, this one included, so that
	// every node gets the same list.
	Peers    []Peer            `json:"peers,omitempty"`
	Versions ComponentVersions `json:"versions,omitzero"`
	Etcd     *EtcdSettings     `json:"etcd,omitempty"`
	Kubeadm  *KubeadmSettings  `json:"kubeadm,omitempty"`
	// PKI carries the cluster CAs a master needs; kubeadm makes the leaf
	// certificates from them. Secret: never logged.
	PKI *ClusterPKI `json:"pki,omitempty"`
	// Leave, when set, tells the node to leave its cluster instead of
	// converging: the controller has marked its machine for removal. The
	// rest of the role is the node's last one, so that it can still reach
	// the members it leaves (Peers are the remaining nodes and itself).
	// The node reports PhaseLeft once it has left.
	Leave *LeaveSettings `json:"leave,omitempty"`
}

// LeaveSettings are a node's instruction to leave its cluster.
type LeaveSettings struct {
	// Deadline is when the controller stops waiting for PhaseLeft and
	// powers the VM off whether or not the node has left.
	Deadline time.Time `json:"deadline"`
	// HandOver says the node is being replaced by a new VM that takes
	// its data disk (an upgrade by reimage): it steps out of service
	// (drained, the VIP and HAProxy given up, etcd leadership moved and
	// the member stopped, the control plane stopped) but undoes nothing
	// of its membership: no etcd member is removed and no kubeadm reset
	// runs, so that the new VM starts as the same member, and the old VM
	// can serve again if the replacement is rolled back.
	HandOver bool `json:"handOver,omitempty"`
	// KeepPods says the drain never gives up: a node that an upgrade
	// replaces leaves only once its pods have moved (their disruption
	// budgets allowing); past the deadline the controller stops the
	// upgrade instead of powering the node off with its pods.
	KeepPods bool `json:"keepPods,omitempty"`
}

// ClusterSettings are shared by every node of a cluster.
type ClusterSettings struct {
	Name              string `json:"name"`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// VIP is the API virtual IP that keepalived holds and HAProxy serves on
	// port 8443.
	VIP string `json:"vip,omitempty"`
	// VRID is the VRRP virtual router ID, unique per cluster on a network.
	VRID        int         `json:"vrid,omitempty"`
	PodCIDR     string      `json:"podCIDR,omitempty"`
	ServiceCIDR string      `json:"serviceCIDR,omitempty"`
	DNSDomain   string      `json:"dnsDomain,omitempty"`
	CNI         CNISettings `json:"cni,omitzero"`
	// KubeProxyMode is kube-proxy's mode (KubeProxyIPVS, KubeProxyIPTables
	// or KubeProxyNFTables); empty means IPVS, the PRD's choice.
	KubeProxyMode string `json:"kubeProxyMode,omitempty"`
	// LoadBalancer configures keepalived and HAProxy on the masters.
	LoadBalancer LoadBalancerSettings `json:"loadBalancer,omitzero"`
}

// LoadBalancerSettings configure the API VIP: keepalived (unicast VRRP)
// and HAProxy (VIP:8443 to every master's apiserver on 6443).
type LoadBalancerSettings struct {
	// VRRPPassword authenticates VRRP adverts (keepalived PASS
	// authentication: 1 to 8 printable characters). Secret.
	VRRPPassword string `json:"vrrpPassword,omitempty"`
	// Timeouts, as Go durations. Client and server default to 4h and the
	// tunnel to 8h, long enough for kubectl logs -f and exec.
	ClientTimeout string `json:"clientTimeout,omitempty"`
	ServerTimeout string `json:"serverTimeout,omitempty"`
	TunnelTimeout string `json:"tunnelTimeout,omitempty"`
	// CheckInterval between L7 health checks; default 2s.
	CheckInterval string `json:"checkInterval,omitempty"`
	// VRRPVersion is 2 (empty: adverts every second, PASS authentication)
	// or 3 (adverts every AdvertInterval, so a lost holder is noticed in
	// about three of them; no authentication, so the masters take VRRP
	// from each other's addresses only). A v2 and a v3 instance do not
	// hear each other: a controller sets 3 only for masters whose agents
	// all report CapabilityVRRPv3.
	VRRPVersion int `json:"vrrpVersion,omitempty"`
	// AdvertInterval between VRRPv3 adverts, a Go duration that is a
	// whole number of centiseconds from 10ms to 40s; default 1s. Only
	// with VRRPVersion 3: VRRPv2 adverts every whole second.
	AdvertInterval string `json:"advertInterval,omitempty"`
}

// DefaultVRRPv3AdvertInterval is what a controller sets with VRRPv3: a
// lost holder is noticed after about a second.
const DefaultVRRPv3AdvertInterval = 300 * time.Millisecond

// Advert is the interval between VRRP adverts the settings ask for.
func (lb *LoadBalancerSettings) Advert() time.Duration {
	if d, err := time.ParseDuration(lb.AdvertInterval); err == nil && lb.VRRPVersion == 3 {
		return d
	}
	return time.Second
}

// CNISettings selects the pod network and configures it. The type is a
// string so that another CNI can be added without a new version; empty
// means contiv, what roles said before the type had another value.
type CNISettings struct {
	Type    string           `json:"type,omitempty"`
	Contiv  *ContivSettings  `json:"contiv,omitempty"`
	Flannel *FlannelSettings `json:"flannel,omitempty"`
}

// The pod networks a cluster can choose.
const (
	// CNIFlannel is flannel with its VXLAN backend: it moves packets.
	CNIFlannel = "flannel"
	// CNIContiv is the seed's choice: configuration only, as Contiv
	// supports no current Kubernetes.
	CNIContiv = "contiv"
)

// NetworkSpec is a cluster spec's pod network.
type NetworkSpec struct {
	// Plugin is flannel (default) or contiv.
	Plugin  string           `json:"plugin,omitempty"`
	Flannel *FlannelSettings `json:"flannel,omitempty"`
	// KubeProxyMode is how kube-proxy implements Services: ipvs (the
	// default, the PRD's choice), iptables, or nftables. A kernel without
	// IPVS (the lab's) needs iptables or nftables.
	KubeProxyMode string `json:"kubeProxyMode,omitempty"`
}

// kube-proxy's modes.
const (
	KubeProxyIPVS     = "ipvs"
	KubeProxyIPTables = "iptables"
	KubeProxyNFTables = "nftables"
	// DefaultKubeProxyMode is the PRD's.
	DefaultKubeProxyMode = KubeProxyIPVS
)

// VSphereProviderID is the Kubernetes provider ID of the VM with that
// BIOS UUID, as the vSphere cloud provider writes it.
func VSphereProviderID(uuid string) string { return "vsphere://" + strings.ToLower(uuid) }

var providerIDPattern = lazyregexp.New(`^vsphere://[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// KubeProxyModes lists the modes, for messages.
var KubeProxyModes = []string{KubeProxyIPVS, KubeProxyIPTables, KubeProxyNFTables}

// ValidateKubeProxyMode refuses a mode kube-proxy does not have, naming
// field; empty is the default.
func ValidateKubeProxyMode(field, mode string) error {
	if mode != "" && !slices.Contains(KubeProxyModes, mode) {
		return fieldErr(field, "must be one of %s, got %q", strings.Join(KubeProxyModes, ", "), mode)
	}
	return nil
}

// FlannelSettings configure flannel's VXLAN backend.
type FlannelSettings struct {
	// VNI is the VXLAN network identifier; default 1.
	VNI int `json:"vni,omitempty"`
	// Port is the VXLAN UDP port; default 8472, the Linux kernel's.
	Port int `json:"port,omitempty"`
}

// ContivSettings configure Contiv in VXLAN mode.
type ContivSettings struct {
	Mode string `json:"mode,omitempty"`
	// VNI is the VXLAN network identifier of the default network.
	VNI int `json:"vni,omitempty"`
}

// NodeAddresses are the node's own addresses, from its inventory.
type NodeAddresses struct {
	IPs       []string `json:"ips,omitempty"`
	DNSNames  []string `json:"dnsNames,omitempty"`
	Interface string   `json:"interface,omitempty"`
}

// Peer is another node of the same cluster.
type Peer struct {
	Name    string   `json:"name"`
	Role    NodeRole `json:"role"`
	Address string   `json:"address"`
	// Rank orders masters for keepalived priorities; 0 is the first.
	Rank int `json:"rank,omitempty"`
}

// ComponentVersions pins what the node runs.
type ComponentVersions struct {
	Kubernetes string `json:"kubernetes,omitempty"`
	Etcd       string `json:"etcd,omitempty"`
	Containerd string `json:"containerd,omitempty"`
	Keepalived string `json:"keepalived,omitempty"`
	HAProxy    string `json:"haproxy,omitempty"`
	CNI        string `json:"cni,omitempty"`
}

// EtcdSettings configure the agent-managed etcd member.
type EtcdSettings struct {
	// DataDir is on the node's data disk; default /var/lib/etcd.
	DataDir string `json:"dataDir,omitempty"`
	// DataDisk says DataDir must be the data disk's mount: the agent
	// starts no member where it is not, because a member on the OS disk
	// is lost with its VM, and an upgrade by reimage would find no data
	// and make a new member instead of restarting the same one.
	DataDisk bool `json:"dataDisk,omitempty"`
	// Snapshots are the member's periodic snapshots; nil takes the
	// defaults.
	Snapshots *EtcdSnapshots `json:"snapshots,omitempty"`
	// SnapshotSince asks, beyond the schedule, for a snapshot that
	// EtcdSnapshotCovers this time: an upgrade sets it to its start, and
	// replaces a master only once the master reports one
	// (Status.EtcdSnapshotAt). Disabled snapshots ignore it.
	SnapshotSince time.Time `json:"snapshotSince,omitzero"`
	// Restore asks the members to restore the cluster's keyspace from
	// one member's snapshot; nil: none asked.
	Restore *EtcdRestore `json:"restore,omitempty"`
	// RemoveMembers are the etcd members (IDs in hex, as
	// Status.EtcdMemberID reports them) of masters the cluster removed
	// without their leaving it: a VM gone, powered off, or silent past
	// its leave deadline. Each counts against the quorum until removed,
	// so a healthy member removes those still listed; never itself, nor
	// a member that is one of the role's peers. At most
	// MaxRemoveMembers, newest last.
	RemoveMembers []string `json:"removeMembers,omitempty"`
}

// MaxRemoveMembers bounds EtcdSettings.RemoveMembers.
const MaxRemoveMembers = 16

var etcdMemberIDPattern = lazyregexp.New(`^[0-9a-f]{1,16}$`)

// ParseEtcdMemberID reads an etcd member ID as agents report it
// (Status.EtcdMemberID) and roles name it: 1 to 16 lowercase hex digits,
// not zero.
func ParseEtcdMemberID(s string) (uint64, error) {
	if !etcdMemberIDPattern.MatchString(s) {
		return 0, fmt.Errorf("%q is not 1 to 16 lowercase hex digits", s)
	}
	id, err := strconv.ParseUint(s, 16, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%q is not an etcd member ID", s)
	}
	return id, nil
}

// EtcdRestore restores a cluster's keyspace from a snapshot one master
// took (EtcdSnapshots), for a cluster that lost its quorum or its data to
// a bad write. Every master stops its control plane and its member at
// once, so that the old cluster serves no more; the source restores the
// snapshot as a new cluster of one member; each other master sets its
// state aside (kept on its data disk) and, once SourceRestored, joins
// that cluster afresh. Each member acts on an ID once, reports it
// (Status.EtcdRestored) when its part is done, and then starts its
// control plane afresh.
type EtcdRestore struct {
	// ID names this restore: 1 to 63 characters of [a-z0-9-].
	ID string `json:"id"`
	// Source is the master whose snapshot is restored.
	Source string `json:"source"`
	// SnapshotTakenAt names the source's snapshot by when it was taken,
	// to the second (Status.EtcdSnapshotAt reports the newest's).
	SnapshotTakenAt time.Time `json:"snapshotTakenAt"`
	// SourceRestored: the source reports its part done, so the others
	// may join its cluster.
	SourceRestored bool `json:"sourceRestored,omitempty"`
	// FromController (the source's role only): the snapshot is the
	// controller's copy (GET PathNodeEtcdSnapshots/{takenAt}), which the
	// source fetches onto its data disk when it has none of that time.
	FromController bool `json:"fromController,omitempty"`
}

var restoreIDPattern = lazyregexp.New(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateRestoreID checks a restore's ID.
func ValidateRestoreID(id string) error {
	if !restoreIDPattern.MatchString(id) {
		return fmt.Errorf("%q is not 1 to 63 characters of [a-z0-9-] starting with a letter or digit", id)
	}
	return nil
}

// validate checks the restore of a role of role (a master's, with its
// peers).
func (e *EtcdRestore) validate(role NodeRole, peers []Peer) error {
	if role != RoleMaster {
		return fieldErr("etcd.restore", "only masters restore etcd, not a %s", role)
	}
	if err := ValidateRestoreID(e.ID); err != nil {
		return fieldErr("etcd.restore.id", "%v", err)
	}
	if !slices.ContainsFunc(peers, func(p Peer) bool { return p.Role == RoleMaster && p.Name == e.Source }) {
		return fieldErr("etcd.restore.source", "%q is not one of the role's masters", e.Source)
	}
	if e.SnapshotTakenAt.IsZero() {
		return fieldErr("etcd.restore.snapshotTakenAt", "missing")
	}
	return nil
}

func (e *EtcdSettings) validateRemoveMembers(role NodeRole) error {
	if len(e.RemoveMembers) == 0 {
		return nil
	}
	if role != RoleMaster {
		return fieldErr("etcd.removeMembers", "only masters remove etcd members, not a %s", role)
	}
	_, err := e.RemoveMemberIDs()
	return err
}

// RemoveMemberIDs parses RemoveMembers: at most MaxRemoveMembers IDs,
// each as ParseEtcdMemberID reads it.
func (e *EtcdSettings) RemoveMemberIDs() ([]uint64, error) {
	if len(e.RemoveMembers) > MaxRemoveMembers {
		return nil, fieldErr("etcd.removeMembers", "at most %d, got %d", MaxRemoveMembers, len(e.RemoveMembers))
	}
	var ids []uint64
	for i, raw := range e.RemoveMembers {
		id, err := ParseEtcdMemberID(raw)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("etcd.removeMembers[%d]", i), "%v", err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// EtcdSnapshotSkew is how much older than asked a snapshot may be and
// still count: the controller and the node each read their own clock.
const EtcdSnapshotSkew = 5 * time.Minute

// EtcdSnapshotCovers reports whether a snapshot taken at taken answers a
// request for one since since.
func EtcdSnapshotCovers(taken, since time.Time) bool {
	return !taken.Before(since.Add(-EtcdSnapshotSkew))
}

// EtcdSnapshots set the snapshots each member takes of the cluster's
// keyspace, into DataDir/snapshots on the data disk, so that a cluster
// that lost its quorum, or its data to a bad write, can be restored
// (etcdctl snapshot restore). Every member takes its own: any survivor
// has one.
type EtcdSnapshots struct {
	// Disabled turns them off; snapshots already taken stay.
	Disabled bool `json:"disabled,omitempty"`
	// Interval between two snapshots, a Go duration from 5m to 168h;
	// default 12h.
	Interval string `json:"interval,omitempty"`
	// Keep is how many, the newest, are kept: 1 to 100; default 5.
	Keep int `json:"keep,omitempty"`
}

// The snapshot schedule an etcd member follows when its role sets none.
const (
	DefaultEtcdSnapshotInterval = 12 * time.Hour
	DefaultEtcdSnapshotKeep     = 5
)

// EtcdSnapshotSchedule is EtcdSnapshots checked, defaults filled in.
type EtcdSnapshotSchedule struct {
	Enabled  bool
	Interval time.Duration
	Keep     int
}

// Schedule checks the settings and fills in the defaults; a nil s is the
// defaults. Errors name the role's field.
func (s *EtcdSnapshots) Schedule() (EtcdSnapshotSchedule, error) {
	return s.schedule("etcd.snapshots")
}

// schedule is Schedule with errors naming field's members.
func (s *EtcdSnapshots) schedule(field string) (EtcdSnapshotSchedule, error) {
	out := EtcdSnapshotSchedule{Enabled: true, Interval: DefaultEtcdSnapshotInterval, Keep: DefaultEtcdSnapshotKeep}
	if s == nil {
		return out, nil
	}
	out.Enabled = !s.Disabled
	if s.Interval != "" {
		d, err := time.ParseDuration(s.Interval)
		if err != nil || d < 5*time.Minute || d > 7*24*time.Hour {
			return out, fieldErr(field+".interval", "%q is not a duration from 5m to 168h", s.Interval)
		}
		out.Interval = d
	}
	switch {
	case s.Keep == 0:
	case s.Keep < 1 || s.Keep > 100:
		return out, fieldErr(field+".keep", "must be from 1 to 100, got %d", s.Keep)
	default:
		out.Keep = s.Keep
	}
	return out, nil
}

// KubeadmSettings are what kubeadm needs beyond the cluster settings.
type KubeadmSettings struct {
	// BootstrapToken ("abcdef.0123456789abcdef") lets workers join: the
	// first master creates it, workers present it. Secret.
	BootstrapToken string `json:"bootstrapToken,omitempty"`
}

// ClusterPKI holds the cluster CAs the controller keeps for a cluster.
type ClusterPKI struct {
	ClusterCA    *KeyPair `json:"clusterCA,omitempty"`
	EtcdCA       *KeyPair `json:"etcdCA,omitempty"`
	FrontProxyCA *KeyPair `json:"frontProxyCA,omitempty"`
	// ServiceAccountKey is the PEM private key that signs service account
	// tokens.
	ServiceAccountKey string `json:"serviceAccountKey,omitempty"`
}

// KeyPair is a PEM certificate and its PEM private key. Workers get the
// cluster CA's certificate alone, to check the apiserver when they join.
type KeyPair struct {
	Certificate string `json:"certificate"`
	Key         string `json:"key,omitempty"`
}

// KubernetesVersion is the Kubernetes version the node runs, with its "v"
// ("v1.34.2"): the cluster's, else the node's pinned one; "" when the role
// names neither, and the node's own kubeadm decides. Every component that
// picks a Kubernetes binary or configuration asks here, so that kubeadm
// and kube-proxy never run different versions.
func (r *Role) KubernetesVersion() string {
	v := r.Cluster.KubernetesVersion
	if v == "" {
		v = r.Versions.Kubernetes
	}
	if v != "" && !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return v
}

const redacted = "REDACTED"

// Redacted returns a copy of the role with every private key replaced, for
// display and logs.
func (r Role) Redacted() Role {
	if r.Cluster.LoadBalancer.VRRPPassword != "" {
		r.Cluster.LoadBalancer.VRRPPassword = redacted
	}
	if r.Kubeadm != nil && r.Kubeadm.BootstrapToken != "" {
		k := *r.Kubeadm
		k.BootstrapToken = redacted
		r.Kubeadm = &k
	}
	if r.PKI == nil {
		return r
	}
	pki := *r.PKI
	for _, kp := range []**KeyPair{&pki.ClusterCA, &pki.EtcdCA, &pki.FrontProxyCA} {
		if *kp != nil && (*kp).Key != "" {
			c := **kp
			c.Key = redacted
			*kp = &c
		}
	}
	if pki.ServiceAccountKey != "" {
		pki.ServiceAccountKey = redacted
	}
	r.PKI = &pki
	return r
}

// DecodeRole reads and validates a role document.
func DecodeRole(rd io.Reader) (*Role, error) {
	var r Role
	if err := decodeStrict(rd, MaxRoleBytes, &r); err != nil {
		return nil, fmt.Errorf("role document: %w", err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("role document: %w", err)
	}
	return &r, nil
}

// parseUnzonedAddr parses an IP address without an interface zone: a zone
// ("fe80::1%eth0") means nothing on another machine, and the daemons that
// get these addresses refuse it.
func parseUnzonedAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err == nil && a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q has an interface zone", s)
	}
	return a, err
}

var (
	versionPattern = lazyregexp.New(`^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]{1,64})?$`)
	labelPattern   = lazyregexp.New(`^` + dnsLabel + `$`)
	ifacePattern   = lazyregexp.New(`^[A-Za-z0-9_.:-]{1,15}$`)
	// bootstrapTokenPattern is kubeadm's own token format.
	bootstrapTokenPattern = lazyregexp.New(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
)

// Validate checks every field and names the first one that is wrong.
func (r *Role) Validate() error {
	if r.APIVersion != APIVersion {
		return fieldErr("apiVersion", "must be %q, got %q", APIVersion, r.APIVersion)
	}
	if r.Kind != "Role" {
		return fieldErr("kind", "must be \"Role\", got %q", r.Kind)
	}
	if err := ValidateNodeName(r.NodeName); err != nil {
		return fieldErr("nodeName", "%v", err)
	}
	if !r.Role.Valid() {
		return fieldErr("role", "must be appliance, master or worker, got %q", r.Role)
	}
	if r.ProviderID != "" && !providerIDPattern.MatchString(r.ProviderID) {
		return fieldErr("providerID", "must be vsphere:// and a UUID, got %q", r.ProviderID)
	}
	if r.Revision < 0 {
		return fieldErr("revision", "must not be negative")
	}
	if err := r.Cluster.validate("cluster"); err != nil {
		return err
	}
	if err := r.Addresses.validate("addresses"); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, p := range r.Peers {
		f := fmt.Sprintf("peers[%d]", i)
		if err := ValidateNodeName(p.Name); err != nil {
			return fieldErr(f+".name", "%v", err)
		}
		if seen[p.Name] {
			return fieldErr(f+".name", "%q appears twice", p.Name)
		}
		seen[p.Name] = true
		if !p.Role.Valid() {
			return fieldErr(f+".role", "must be appliance, master or worker, got %q", p.Role)
		}
		if _, err := parseUnzonedAddr(p.Address); err != nil {
			return fieldErr(f+".address", "%q is not an IP address without a zone", p.Address)
		}
		if p.Rank < 0 || p.Rank > 254 {
			return fieldErr(f+".rank", "must be between 0 and 254")
		}
	}
	if err := r.Versions.validate("versions"); err != nil {
		return err
	}
	if r.Etcd != nil && r.Etcd.DataDir != "" {
		if !path.IsAbs(r.Etcd.DataDir) || path.Clean(r.Etcd.DataDir) != r.Etcd.DataDir || r.Etcd.DataDir == "/" {
			return fieldErr("etcd.dataDir", "must be a clean absolute path other than /, got %q", r.Etcd.DataDir)
		}
	}
	if r.Etcd != nil {
		if _, err := r.Etcd.Snapshots.Schedule(); err != nil {
			return err
		}
		if r.Etcd.Restore != nil {
			if err := r.Etcd.Restore.validate(r.Role, r.Peers); err != nil {
				return err
			}
		}
		if err := r.Etcd.validateRemoveMembers(r.Role); err != nil {
			return err
		}
	}
	if r.Kubeadm != nil && r.Kubeadm.BootstrapToken != "" && !bootstrapTokenPattern.MatchString(r.Kubeadm.BootstrapToken) {
		return fieldErr("kubeadm.bootstrapToken", "must look like abcdef.0123456789abcdef (6 and 16 characters of [a-z0-9])")
	}
	if r.PKI != nil {
		// A worker gets CA certificates alone; a master makes leaf
		// certificates and needs the keys.
		if err := r.PKI.validate("pki", r.Role != RoleWorker); err != nil {
			return err
		}
	}
	if r.Leave != nil && r.Leave.Deadline.IsZero() {
		return fieldErr("leave.deadline", "required when leave is present")
	}
	return nil
}

func (c *ClusterSettings) validate(f string) error {
	if !labelPattern.MatchString(c.Name) {
		return fieldErr(f+".name", "%q is not a lowercase DNS label", c.Name)
	}
	if c.KubernetesVersion != "" && !versionPattern.MatchString(c.KubernetesVersion) {
		return fieldErr(f+".kubernetesVersion", "%q is not a version such as v1.31.2", c.KubernetesVersion)
	}
	if c.VIP != "" {
		if vip, err := parseUnzonedAddr(c.VIP); err != nil || vip.IsUnspecified() || vip.IsMulticast() {
			return fieldErr(f+".vip", "%q is not a unicast IP address without a zone", c.VIP)
		}
	}
	if c.VRID < 0 || c.VRID > 255 {
		return fieldErr(f+".vrid", "must be between 1 and 255, got %d", c.VRID)
	}
	var prefixes []netip.Prefix
	for _, cidr := range []struct{ name, value string }{{"podCIDR", c.PodCIDR}, {"serviceCIDR", c.ServiceCIDR}} {
		if cidr.value == "" {
			continue
		}
		p, err := netip.ParsePrefix(cidr.value)
		if err != nil || p.Masked() != p {
			return fieldErr(f+"."+cidr.name, "%q is not a network in CIDR form", cidr.value)
		}
		prefixes = append(prefixes, p)
	}
	if len(prefixes) == 2 && prefixes[0].Overlaps(prefixes[1]) {
		return fieldErr(f+".serviceCIDR", "%s overlaps podCIDR %s", prefixes[1], prefixes[0])
	}
	if c.DNSDomain != "" && ValidateNodeName(c.DNSDomain) != nil {
		return fieldErr(f+".dnsDomain", "%q is not a DNS name", c.DNSDomain)
	}
	if err := c.LoadBalancer.validate(f + ".loadBalancer"); err != nil {
		return err
	}
	if err := ValidateKubeProxyMode(f+".kubeProxyMode", c.KubeProxyMode); err != nil {
		return err
	}
	if c.CNI.Type != "" && c.CNI.Type != CNIContiv && c.CNI.Type != CNIFlannel {
		return fieldErr(f+".cni.type", "must be %q or %q, got %q", CNIFlannel, CNIContiv, c.CNI.Type)
	}
	if fl := c.CNI.Flannel; fl != nil {
		if fl.VNI < 0 || fl.VNI > 1<<24-1 {
			return fieldErr(f+".cni.flannel.vni", "must be between 1 and 16777215")
		}
		if fl.Port < 0 || fl.Port > 65535 {
			return fieldErr(f+".cni.flannel.port", "must be between 1 and 65535")
		}
	}
	if ct := c.CNI.Contiv; ct != nil {
		if ct.Mode != "" && ct.Mode != "vxlan" {
			return fieldErr(f+".cni.contiv.mode", "must be \"vxlan\", got %q", ct.Mode)
		}
		if ct.VNI < 0 || ct.VNI > 1<<24-1 {
			return fieldErr(f+".cni.contiv.vni", "must be between 1 and 16777215")
		}
	}
	return nil
}

// vrrpPasswordPattern keeps to characters keepalived's configuration
// reads as they are: '#' and '!' start a comment anywhere on a line, and
// quotes, braces and '$' are its syntax too.
var vrrpPasswordPattern = lazyregexp.New(`^[A-Za-z0-9._+-]{1,8}$`)

func (lb *LoadBalancerSettings) validate(f string) error {
	if lb.VRRPPassword != "" && !vrrpPasswordPattern.MatchString(lb.VRRPPassword) {
		return fieldErr(f+".vrrpPassword", "must be 1 to 8 of A-Z, a-z, 0-9 and . _ + -")
	}
	switch lb.VRRPVersion {
	case 0, 2, 3:
	default:
		return fieldErr(f+".vrrpVersion", "must be 2 or 3, got %d", lb.VRRPVersion)
	}
	if lb.AdvertInterval != "" {
		d, err := time.ParseDuration(lb.AdvertInterval)
		switch {
		case lb.VRRPVersion != 3:
			return fieldErr(f+".advertInterval", "is for VRRPv3 (vrrpVersion 3); VRRPv2 adverts every second")
		case err != nil || d < 10*time.Millisecond || d > 40*time.Second || d%(10*time.Millisecond) != 0:
			return fieldErr(f+".advertInterval", "%q is not a whole number of centiseconds from 10ms to 40s", lb.AdvertInterval)
		}
	}
	for _, d := range []struct{ name, value string }{
		{"clientTimeout", lb.ClientTimeout}, {"serverTimeout", lb.ServerTimeout},
		{"tunnelTimeout", lb.TunnelTimeout}, {"checkInterval", lb.CheckInterval},
	} {
		if d.value == "" {
			continue
		}
		v, err := time.ParseDuration(d.value)
		if err != nil || v < 100*time.Millisecond || v > 7*24*time.Hour {
			return fieldErr(f+"."+d.name, "%q is not a duration between 100ms and 168h", d.value)
		}
	}
	return nil
}

func (a *NodeAddresses) validate(f string) error {
	for i, ip := range a.IPs {
		if _, err := parseUnzonedAddr(ip); err != nil {
			return fieldErr(fmt.Sprintf("%s.ips[%d]", f, i), "%q is not an IP address without a zone", ip)
		}
	}
	for i, name := range a.DNSNames {
		if err := ValidateNodeName(name); err != nil {
			return fieldErr(fmt.Sprintf("%s.dnsNames[%d]", f, i), "%v", err)
		}
	}
	if a.Interface != "" && !ifacePattern.MatchString(a.Interface) {
		return fieldErr(f+".interface", "%q is not an interface name", a.Interface)
	}
	return nil
}

func (v *ComponentVersions) validate(f string) error {
	for _, c := range []struct{ name, value string }{
		{"kubernetes", v.Kubernetes}, {"etcd", v.Etcd}, {"containerd", v.Containerd},
		{"keepalived", v.Keepalived}, {"haproxy", v.HAProxy}, {"cni", v.CNI},
	} {
		if c.value != "" && !versionPattern.MatchString(c.value) {
			return fieldErr(f+"."+c.name, "%q is not a version such as 1.2.3", c.value)
		}
	}
	return nil
}

func (p *ClusterPKI) validate(f string, needKeys bool) error {
	for _, kp := range []struct {
		name string
		pair *KeyPair
	}{{"clusterCA", p.ClusterCA}, {"etcdCA", p.EtcdCA}, {"frontProxyCA", p.FrontProxyCA}} {
		if kp.pair == nil {
			continue
		}
		certs, err := ParseCertificatesPEM([]byte(kp.pair.Certificate))
		if err != nil {
			return fieldErr(f+"."+kp.name+".certificate", "%v", err)
		}
		if !certs[0].IsCA {
			return fieldErr(f+"."+kp.name+".certificate", "is not a CA certificate")
		}
		if kp.pair.Key == "" && !needKeys {
			continue
		}
		if err := keyMatches(kp.pair.Key, certs[0]); err != nil {
			return fieldErr(f+"."+kp.name+".key", "%v", err)
		}
	}
	if p.ServiceAccountKey != "" {
		if _, err := ParsePrivateKeyPEM([]byte(p.ServiceAccountKey)); err != nil {
			return fieldErr(f+".serviceAccountKey", "%v", err)
		}
	}
	return nil
}

// ParsePrivateKeyPEM parses one PKCS#8, SEC1 or PKCS#1 private key.
func ParsePrivateKeyPEM(data []byte) (any, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("is not a PEM private key")
	}
	switch block.Type {
	case "PRIVATE KEY":
		return x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	}
	return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
}

type publicKeyer interface {
	Public() crypto.PublicKey
}

type equaler interface {
	Equal(crypto.PublicKey) bool
}

func keyMatches(keyPEM string, cert *x509.Certificate) error {
	key, err := ParsePrivateKeyPEM([]byte(keyPEM))
	if err != nil {
		return err
	}
	signer, ok := key.(publicKeyer)
	if !ok {
		return fmt.Errorf("unsupported key type %T", key)
	}
	pub, ok := signer.Public().(equaler)
	if !ok || !pub.Equal(cert.PublicKey) {
		return fmt.Errorf("does not match the certificate")
	}
	return nil
}
