package v1

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
)

// Image is a golden OVA imported into a provider as a VM template.
type Image struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	// SHA256 of the OVA file: importing the same file again is a no-op.
	SHA256 string `json:"sha256"`
	// Role is harmony.image.role: "node" or "control-plane".
	Role    string `json:"role"`
	Version string `json:"version"`
	// Template is the template's inventory path; Snapshot, when set, is
	// the snapshot that linked clones start from.
	Template string `json:"template"`
	Snapshot string `json:"snapshot,omitempty"`
	// Versions are the harmony.version.* properties of the OVA.
	Versions map[string]string `json:"versions"`
	// KubernetesVersions are the versions a cluster may ask for: n, then
	// n-1.
	KubernetesVersions []string  `json:"kubernetesVersions"`
	State              string    `json:"state"`
	Message            string    `json:"message,omitempty"`
	ImportedAt         time.Time `json:"importedAt,omitzero"`
}

// Image states.
const (
	ImageImporting = "Importing"
	ImageReady     = "Ready"
	ImageFailed    = "Failed"
)

// ImageList answers GET PathImages.
type ImageList struct {
	Items []Image `json:"items"`
}

// NodeSize is a VM's CPU and memory.
type NodeSize struct {
	CPUs      int `json:"cpus"`
	MemoryMiB int `json:"memoryMiB"`
}

// ClusterSpec is what an admin asks for.
type ClusterSpec struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Provider   string `json:"provider"`
	// Image names an imported node image of the provider.
	Image string `json:"image"`
	// KubernetesVersion is n or n-1 of what the image carries; default n.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Masters defaults to 3 and must be odd.
	Masters *int `json:"masters,omitempty"`
	Workers int  `json:"workers"`
	// MasterSize defaults from the PRD's sizing table by cluster size.
	MasterSize *NodeSize `json:"masterSize,omitempty"`
	// WorkerSize defaults to 2 vCPUs and 4 GiB.
	WorkerSize *NodeSize `json:"workerSize,omitempty"`
	// VIP is the API virtual IP, from the provider's IP pool.
	VIP         string `json:"vip"`
	PodCIDR     string `json:"podCIDR,omitempty"`
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	DNSDomain   string `json:"dnsDomain,omitempty"`
	// Network chooses the pod network's plugin and configures it; the
	// default is flannel (VXLAN).
	Network *NetworkSpec `json:"network,omitempty"`
	// Contiv configures Contiv (VXLAN) when network.plugin is contiv:
	// configuration only, as no Contiv binaries run on a current
	// Kubernetes. A spec that gives contiv and no network.plugin means
	// contiv, as it did before network existed.
	Contiv *ContivSettings `json:"contiv,omitempty"`
	// MasterDataDiskGiB sizes each master's persistent data disk (etcd);
	// default 20.
	MasterDataDiskGiB int `json:"masterDataDiskGiB,omitempty"`
	// EtcdSnapshots sets the snapshots each master's etcd member takes
	// onto its data disk; default every 12h, the newest 5 kept.
	EtcdSnapshots *EtcdSnapshots `json:"etcdSnapshots,omitempty"`
}

// Cluster defaults and bounds.
const (
	DefaultMasters           = 3
	MaxMasters               = 7
	MaxWorkers               = 1000
	DefaultMasterDataDiskGiB = 20
	MaxDataDiskGiB           = 64 << 10 // the PRD's 64 TB per persistent disk
	DefaultPodCIDR           = "10.244.0.0/16"
	DefaultServiceCIDR       = "10.96.0.0/12"
	DefaultDNSDomain         = "cluster.local"
	DefaultContivVNI         = 4096
	DefaultNetworkPlugin     = CNIFlannel
	// flannel's VXLAN defaults: VNI 1 on the Linux kernel's port.
	DefaultFlannelVNI  = 1
	DefaultFlannelPort = 8472
	// MaxClusterNameLength leaves room for node name suffixes and vSphere
	// folder names.
	MaxClusterNameLength = 40
)

// DefaultWorkerSize is a worker's size when the spec gives none.
var DefaultWorkerSize = NodeSize{CPUs: 2, MemoryMiB: 4096}

// MasterSizeFor is the PRD's sizing table: masters sized like public
// cloud machine types by the cluster's node count.
func MasterSizeFor(nodes int) NodeSize {
	switch {
	case nodes <= 5:
		return NodeSize{CPUs: 1, MemoryMiB: 3840} // n1-standard-1
	case nodes <= 10:
		return NodeSize{CPUs: 2, MemoryMiB: 7680} // n1-standard-2
	case nodes <= 100:
		return NodeSize{CPUs: 4, MemoryMiB: 15360} // n1-standard-4
	case nodes <= 250:
		return NodeSize{CPUs: 8, MemoryMiB: 30720} // n1-standard-8
	case nodes <= 500:
		return NodeSize{CPUs: 16, MemoryMiB: 61440} // n1-standard-16
	default:
		return NodeSize{CPUs: 32, MemoryMiB: 122880} // n1-standard-32
	}
}

// DecodeClusterSpec reads a cluster spec, applies its defaults and
// validates it.
func DecodeClusterSpec(r io.Reader) (*ClusterSpec, error) {
	var s ClusterSpec
	if err := decodeStrict(r, MaxAdminBytes, &s); err != nil {
		return nil, err
	}
	s.Default()
	return &s, s.Validate()
}

// Default fills in what the spec leaves out. The Kubernetes version is
// defaulted by the controller, which knows the image.
func (s *ClusterSpec) Default() {
	if s.Masters == nil {
		m := DefaultMasters
		s.Masters = &m
	}
	if s.MasterSize == nil {
		size := MasterSizeFor(*s.Masters + s.Workers)
		s.MasterSize = &size
	}
	if s.WorkerSize == nil {
		size := DefaultWorkerSize
		s.WorkerSize = &size
	}
	if s.PodCIDR == "" {
		s.PodCIDR = DefaultPodCIDR
	}
	if s.ServiceCIDR == "" {
		s.ServiceCIDR = DefaultServiceCIDR
	}
	if s.DNSDomain == "" {
		s.DNSDomain = DefaultDNSDomain
	}
	if s.Network == nil {
		s.Network = &NetworkSpec{}
	}
	if s.Network.Plugin == "" {
		// A spec written before network existed says contiv by giving
		// its settings.
		s.Network.Plugin = DefaultNetworkPlugin
		if s.Contiv != nil {
			s.Network.Plugin = CNIContiv
		}
	}
	if s.Network.KubeProxyMode == "" {
		s.Network.KubeProxyMode = DefaultKubeProxyMode
	}
	switch s.Network.Plugin {
	case CNIFlannel:
		if s.Network.Flannel == nil {
			s.Network.Flannel = &FlannelSettings{}
		}
		if s.Network.Flannel.VNI == 0 {
			s.Network.Flannel.VNI = DefaultFlannelVNI
		}
		if s.Network.Flannel.Port == 0 {
			s.Network.Flannel.Port = DefaultFlannelPort
		}
	case CNIContiv:
		if s.Contiv == nil {
			s.Contiv = &ContivSettings{}
		}
		if s.Contiv.Mode == "" {
			s.Contiv.Mode = "vxlan"
		}
		if s.Contiv.VNI == 0 {
			s.Contiv.VNI = DefaultContivVNI
		}
	}
	if s.MasterDataDiskGiB == 0 {
		s.MasterDataDiskGiB = DefaultMasterDataDiskGiB
	}
}

// Validate checks a defaulted spec on its own; what needs the provider
// and the image (the VIP in the pool, the version in the image) is the
// controller's check.
func (s *ClusterSpec) Validate() error {
	if s.APIVersion != APIVersion {
		return fieldErr("apiVersion", "must be %q, got %q", APIVersion, s.APIVersion)
	}
	if s.Kind != "Cluster" {
		return fieldErr("kind", "must be \"Cluster\", got %q", s.Kind)
	}
	if !labelPattern.MatchString(s.Name) || len(s.Name) > MaxClusterNameLength {
		return fieldErr("name", "%q is not a lowercase DNS label of at most %d characters", s.Name, MaxClusterNameLength)
	}
	if !labelPattern.MatchString(s.Provider) {
		return fieldErr("provider", "%q is not a provider name", s.Provider)
	}
	if !labelPattern.MatchString(s.Image) && ValidateNodeName(s.Image) != nil {
		return fieldErr("image", "%q is not an image name", s.Image)
	}
	if s.KubernetesVersion != "" && !versionPattern.MatchString(s.KubernetesVersion) {
		return fieldErr("kubernetesVersion", "%q is not a version such as v1.34.2", s.KubernetesVersion)
	}
	if err := ValidateCounts(*s.Masters, s.Workers); err != nil {
		return err
	}
	if err := s.MasterSize.validate("masterSize", 32, 122880); err != nil {
		return err
	}
	// The PRD's node range: 1 vCPU and 2 GB up to 8 vCPUs and 52 GB.
	if err := s.WorkerSize.validate("workerSize", 8, 53248); err != nil {
		return err
	}
	vip, err := parseUnzonedAddr(s.VIP)
	if err != nil || !vip.Is4() || vip.IsUnspecified() || vip.IsMulticast() || vip.IsLoopback() {
		return fieldErr("vip", "%q is not a unicast IPv4 address", s.VIP)
	}
	if s.Network != nil && s.Network.Plugin != CNIFlannel && s.Network.Plugin != CNIContiv {
		return fieldErr("network.plugin", "must be %q or %q, got %q", CNIFlannel, CNIContiv, s.Network.Plugin)
	}
	if s.Network != nil && s.Network.Plugin != CNIContiv && s.Contiv != nil {
		return fieldErr("contiv", "applies only when network.plugin is %q, and it is %q", CNIContiv, s.Network.Plugin)
	}
	if s.Network != nil && s.Network.Plugin != CNIFlannel && s.Network.Flannel != nil {
		return fieldErr("network.flannel", "applies only when network.plugin is %q, and it is %q", CNIFlannel, s.Network.Plugin)
	}
	if s.Network != nil {
		if err := ValidateKubeProxyMode("network.kubeProxyMode", s.Network.KubeProxyMode); err != nil {
			return err
		}
	}
	cni := s.CNI()
	settings := ClusterSettings{Name: s.Name, PodCIDR: s.PodCIDR, ServiceCIDR: s.ServiceCIDR, DNSDomain: s.DNSDomain, CNI: cni}
	if err := settings.validate(""); err != nil {
		fe := err.(*FieldError)
		field := trimDot(fe.Field)
		field = strings.Replace(field, "cni.contiv.", "contiv.", 1)
		field = strings.Replace(field, "cni.flannel.", "network.flannel.", 1)
		return fieldErr(field, "%s", fe.Problem)
	}
	switch {
	case cni.Contiv != nil && cni.Contiv.VNI < 1:
		return fieldErr("contiv.vni", "must be between 1 and 16777215")
	case cni.Flannel != nil && cni.Flannel.VNI < 1:
		return fieldErr("network.flannel.vni", "must be between 1 and 16777215")
	case cni.Flannel != nil && cni.Flannel.Port < 1:
		return fieldErr("network.flannel.port", "must be between 1 and 65535")
	}
	for _, c := range []struct{ name, value string }{{"podCIDR", s.PodCIDR}, {"serviceCIDR", s.ServiceCIDR}} {
		if netip.MustParsePrefix(c.value).Contains(vip) {
			return fieldErr("vip", "%s is inside %s %s", vip, c.name, c.value)
		}
	}
	if s.MasterDataDiskGiB < 1 || s.MasterDataDiskGiB > MaxDataDiskGiB {
		return fieldErr("masterDataDiskGiB", "must be between 1 and %d", MaxDataDiskGiB)
	}
	if _, err := s.EtcdSnapshots.schedule("etcdSnapshots"); err != nil {
		return err
	}
	return nil
}

// CNI is the pod network the spec asks for, as the roles carry it. A spec
// without network (stored before it existed) keeps Contiv.
func (s *ClusterSpec) CNI() CNISettings {
	if s.Network == nil || s.Network.Plugin == CNIContiv {
		return CNISettings{Type: CNIContiv, Contiv: s.Contiv}
	}
	return CNISettings{Type: s.Network.Plugin, Flannel: s.Network.Flannel}
}

// KubeProxyMode is the mode the roles carry: a spec stored before the
// field existed gets the default.
func (s *ClusterSpec) KubeProxyMode() string {
	if s.Network == nil || s.Network.KubeProxyMode == "" {
		return DefaultKubeProxyMode
	}
	return s.Network.KubeProxyMode
}

// ValidateCounts checks master and worker counts: masters odd, so that
// etcd keeps a majority.
func ValidateCounts(masters, workers int) error {
	if masters < 1 || masters > MaxMasters {
		return fieldErr("masters", "must be between 1 and %d, got %d", MaxMasters, masters)
	}
	if masters%2 == 0 {
		return fieldErr("masters", "must be odd so that etcd keeps a majority, got %d", masters)
	}
	if workers < 0 || workers > MaxWorkers {
		return fieldErr("workers", "must be between 0 and %d, got %d", MaxWorkers, workers)
	}
	return nil
}

func trimDot(f string) string {
	if len(f) > 0 && f[0] == '.' {
		return f[1:]
	}
	return f
}

func (n *NodeSize) validate(f string, maxCPUs, maxMiB int) error {
	if n.CPUs < 1 || n.CPUs > maxCPUs {
		return fieldErr(f+".cpus", "must be between 1 and %d, got %d", maxCPUs, n.CPUs)
	}
	if n.MemoryMiB < 2048 || n.MemoryMiB > maxMiB {
		return fieldErr(f+".memoryMiB", "must be between 2048 and %d, got %d", maxMiB, n.MemoryMiB)
	}
	if n.MemoryMiB%4 != 0 {
		return fieldErr(f+".memoryMiB", "must be a multiple of 4 (vSphere's rule), got %d", n.MemoryMiB)
	}
	return nil
}

// ScaleRequest is the body of POST PathClusters/{name}/scale. Masters
// change in pairs, so that the count stays odd.
type ScaleRequest struct {
	Masters *int `json:"masters,omitempty"`
	Workers *int `json:"workers,omitempty"`
}

// DecodeScaleRequest reads a scale request.
func DecodeScaleRequest(r io.Reader) (*ScaleRequest, error) {
	var s ScaleRequest
	if err := decodeStrict(r, MaxAdminBytes, &s); err != nil {
		return nil, err
	}
	if s.Masters == nil && s.Workers == nil {
		return nil, fieldErr("workers", "give workers, masters or both")
	}
	return &s, nil
}

// Cluster is a cluster as the API shows it.
type Cluster struct {
	Spec   ClusterSpec   `json:"spec"`
	Status ClusterStatus `json:"status"`
	// Access is the caller's role on the cluster (admin for the
	// controller's admins), which decides what it may do there: the
	// console shows only the actions it allows.
	Access GrantRole `json:"access,omitempty"`
}

// ClusterList answers GET PathClusters.
type ClusterList struct {
	Items []Cluster `json:"items"`
}

// ClusterLeftovers is what a cluster deleted without purge left behind:
// the folder of its masters' data disks on each datastore that may hold
// them, which keep its etcd member state and keyspace, and the
// controller's copies of its etcd snapshots. No cluster uses them; only
// a purge (DELETE PathLeftovers/{id}) removes them.
type ClusterLeftovers struct {
	// ID is the cluster's name and UID, ClusterInstance(Cluster, UID).
	ID        string    `json:"id"`
	Cluster   string    `json:"cluster"`
	UID       string    `json:"uid"`
	Provider  string    `json:"provider"`
	DeletedAt time.Time `json:"deletedAt"`
	// DataDiskFolders are datastore paths, "[datastore] folder".
	DataDiskFolders []string `json:"dataDiskFolders"`
	// EtcdSnapshotCopies counts the controller's copies left.
	EtcdSnapshotCopies int `json:"etcdSnapshotCopies"`
}

// ClusterLeftoversList answers GET PathLeftovers.
type ClusterLeftoversList struct {
	Items []ClusterLeftovers `json:"items"`
}

// ClusterInstance names one cluster apart from any other that had or
// will have its name: its data-disk folder, its snapshot copies and its
// leftovers are named so.
func ClusterInstance(name, uid string) string { return name + "-" + uid }

// Cluster phases.
const (
	PhaseProvisioning = "Provisioning"
	PhaseUpgrading    = "Upgrading"
	PhaseRunning      = "Running"
	PhaseDeleting     = "Deleting"
	PhaseFailed       = "Failed"
)

// ClusterStatus merges the controller's workflow, vCenter and the agents'
// reports.
type ClusterStatus struct {
	Phase              string        `json:"phase"`
	Generation         int64         `json:"generation"`
	ObservedGeneration int64         `json:"observedGeneration"`
	Conditions         []Condition   `json:"conditions,omitempty"`
	Nodes              []ClusterNode `json:"nodes"`
	Events             []Event       `json:"events,omitempty"`
	// Upgrade is the newest upgrade, running or finished.
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`
	// EtcdSnapshotCopies are the copies the controller keeps of the
	// masters' etcd snapshots, oldest first (GET only).
	EtcdSnapshotCopies []EtcdSnapshotCopy `json:"etcdSnapshotCopies,omitempty"`
	// EtcdSnapshotRequest is the newest snapshot asked for by hand
	// (POST PathClusters/{name}/etcd-snapshot), running or ended.
	EtcdSnapshotRequest *EtcdSnapshotRequest `json:"etcdSnapshotRequest,omitempty"`
	CreatedAt           time.Time            `json:"createdAt"`
}

// Condition is one aspect of a cluster's state, Kubernetes-style.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// Condition types.
const (
	ConditionProvisioned = "Provisioned"
	ConditionFailed      = "Failed"
	ConditionNodesReady  = "NodesReady"
	// ConditionKubernetesNodesReady counts the Kubernetes Nodes whose
	// Ready condition is True, as the agents report them.
	ConditionKubernetesNodesReady = "KubernetesNodesReady"
	// ConditionPodNetwork says which pod network the cluster runs, and
	// whether it moves packets: Contiv's is configuration only.
	ConditionPodNetwork = "PodNetwork"
	// ConditionUpgrading is True while an upgrade runs, with what it
	// waits for; False once it stopped, with how (its state).
	ConditionUpgrading = "Upgrading"
	// ConditionRestoring is True while an etcd restore runs, with what it
	// waits for; False once it stopped short (a newer restore replaced
	// it, or the cluster is deleted). It goes when the restore is done.
	ConditionRestoring = "Restoring"
)

// The steps of a master's replacement by reimage, in order, as
// ClusterNode.Upgrade shows them.
const (
	SwapHandingOver  = "HandingOver"
	SwapHandedOver   = "HandedOver"
	SwapOldOff       = "OldPoweredOff"
	SwapDiskDetached = "DiskDetached"
	SwapCloning      = "Cloning"
	SwapVerifying    = "Verifying"
	SwapVerified     = "Verified"
	SwapRolledBack   = "RolledBack"
)

// ClusterNode is one VM of a cluster.
type ClusterNode struct {
	Name string   `json:"name"`
	Role NodeRole `json:"role"`
	IP   string   `json:"ip,omitempty"`
	// Phase: Pending, Provisioning, Booting, Enrolled, Ready,
	// Unresponsive (its agent has not reported for StatusStaleAfter),
	// Removing, Kept (powered off for troubleshooting) or Failed.
	Phase string `json:"phase"`
	// Step is the last workflow step done.
	Step      string `json:"step"`
	VM        string `json:"vm,omitempty"`
	Power     string `json:"power,omitempty"`
	GuestIP   string `json:"guestIP,omitempty"`
	DataDisk  string `json:"dataDisk,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// AgentPhase is the agent's own report, when it has reported.
	AgentPhase string `json:"agentPhase,omitempty"`
	// LastReport is when the agent last reported.
	LastReport *time.Time `json:"lastReport,omitempty"`
	// Kubernetes is the node's Kubernetes Node as its agent last saw it:
	// Ready, NotReady or Unknown; empty before the node has joined.
	Kubernetes     string `json:"kubernetes,omitempty"`
	KubeletVersion string `json:"kubeletVersion,omitempty"`
	// EtcdSnapshotAt is when a master's newest etcd snapshot was taken,
	// as its agent last reported.
	EtcdSnapshotAt *time.Time `json:"etcdSnapshotAt,omitempty"`
	// EtcdSnapshots is when each of a master's etcd snapshots was taken,
	// oldest first, as its agent last reported: what a restore may name.
	EtcdSnapshots []time.Time `json:"etcdSnapshots,omitempty"`
	// EtcdRestored is the newest etcd restore whose part a master's agent
	// reports done.
	EtcdRestored string `json:"etcdRestored,omitempty"`
	// Components is the health of each part the agent configures
	// (keepalived, haproxy, etcd, kubeadm, cni, …), as it last reported.
	Components []ComponentStatus `json:"components,omitempty"`
	// Image is the node image its VM was cloned from.
	Image string `json:"image,omitempty"`
	// Upgrade is how far the node's replacement got, while an upgrade or
	// a replace-node replaces it: for a master one of the Swap steps, or
	// "RollingBack from STEP"; for a worker "ReplacedBy SURGE", and on
	// that surge worker "Replaces WORKER", until the old worker is gone.
	Upgrade string `json:"upgrade,omitempty"`
}

// The prefixes of ClusterNode.Upgrade that are not a Swap step.
const (
	UpgradeRollingBack = "RollingBack from "
	UpgradeReplacedBy  = "ReplacedBy "
	UpgradeReplaces    = "Replaces "
)

// Event is one thing that happened to a cluster.
type Event struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"` // Normal or Warning
	Node    string    `json:"node,omitempty"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
}

// Operation is a long-running change that a client polls or watches.
type Operation struct {
	ID      string        `json:"id"`
	Kind    OperationKind `json:"kind"`
	Cluster string        `json:"cluster,omitempty"`
	Image   string        `json:"image,omitempty"`
	// Generation is the cluster generation the operation waits for.
	Generation int64     `json:"generation,omitempty"`
	State      string    `json:"state"`
	Message    string    `json:"message,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Nodes and Events show progress; Revision is the newest event's
	// sequence, for the next watch.
	Nodes    []ClusterNode `json:"nodes,omitempty"`
	Events   []Event       `json:"events,omitempty"`
	Revision int64         `json:"revision"`
}

// OperationKind says what an operation does.
type OperationKind string

// Operation kinds.
const (
	OperationCreate     OperationKind = "create"
	OperationScale      OperationKind = "scale"
	OperationRemoveNode OperationKind = "remove-node"
	// OperationReplaceNode replaces a master's VM (ReplaceNodeRequest).
	OperationReplaceNode OperationKind = "replace-node"
	OperationDelete      OperationKind = "delete"
	OperationRetry       OperationKind = "retry"
	OperationImport      OperationKind = "import"
	OperationUpgrade     OperationKind = "upgrade"
	OperationRestore     OperationKind = "restore"
	// OperationEtcdSnapshot is a snapshot asked for by hand.
	OperationEtcdSnapshot OperationKind = "etcd-snapshot"
)

// Operation states.
const (
	OperationRunning   = "Running"
	OperationSucceeded = "Succeeded"
	OperationFailed    = "Failed"
)

// Done reports whether the operation has finished.
func (o *Operation) Done() bool { return o.State != OperationRunning }

// NetworkGuestinfoKey is the guestinfo key that carries a VM's
// NetworkConfig, base64 JSON (see DecodeNetworkGuestinfo).
const NetworkGuestinfoKey = "guestinfo.harmony.network"

// NetworkConfig is guestinfo.harmony.network: the static address a VM
// gets from its provider's pool, written beside the bootstrap.
type NetworkConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Address is the IPv4 address with its prefix, e.g. 198.18.10.21/24.
	Address string   `json:"address"`
	Gateway string   `json:"gateway"`
	DNS     []string `json:"dns,omitempty"`
	// Hostname is the node's name.
	Hostname string `json:"hostname"`
}

// DecodeNetworkConfig reads and validates guestinfo.harmony.network.
func DecodeNetworkConfig(r io.Reader) (*NetworkConfig, error) {
	var n NetworkConfig
	if err := decodeStrict(r, MaxBootstrapBytes, &n); err != nil {
		return nil, err
	}
	return &n, n.Validate()
}

// Validate checks a network config.
func (n *NetworkConfig) Validate() error {
	if n.APIVersion != APIVersion {
		return fieldErr("apiVersion", "must be %q, got %q", APIVersion, n.APIVersion)
	}
	if n.Kind != "NetworkConfig" {
		return fieldErr("kind", "must be \"NetworkConfig\", got %q", n.Kind)
	}
	p, err := netip.ParsePrefix(n.Address)
	if err != nil || !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 31 {
		return fieldErr("address", "%q is not an IPv4 address with a prefix length 8-31", n.Address)
	}
	if gw, err := netip.ParseAddr(n.Gateway); err != nil || !p.Masked().Contains(gw) {
		return fieldErr("gateway", "%q is not an address in %s", n.Gateway, p.Masked())
	}
	for i, d := range n.DNS {
		// A zone is free text (newlines too) that would reach networkd's
		// file: refused, like anything but a plain address.
		if a, err := netip.ParseAddr(d); err != nil || a.Zone() != "" {
			return fieldErr(fmt.Sprintf("dns[%d]", i), "%q is not an IP address", d)
		}
	}
	if err := ValidateNodeName(n.Hostname); err != nil {
		return fieldErr("hostname", "%v", err)
	}
	return nil
}
