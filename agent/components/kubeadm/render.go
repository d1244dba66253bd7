package kubeadm

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	v1 "github.com/harmonykaas/harmony/api/v1"
)

// kubeadm's v1beta4 configuration, reduced to the fields the component
// sets. Our own small structs: the main module does not import
// k8s.io/kubernetes. kubeadm decodes strictly, so a misspelt field here
// is caught by `kubeadm config validate` in the tests.
const kubeadmAPIVersion = "kubeadm.k8s.io/v1beta4"

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

type initConfiguration struct {
	typeMeta
	BootstrapTokens  []bootstrapToken `json:"bootstrapTokens,omitempty"`
	NodeRegistration nodeRegistration `json:"nodeRegistration"`
	LocalAPIEndpoint apiEndpoint      `json:"localAPIEndpoint"`
	Patches          *patches         `json:"patches,omitempty"`
}

// patches is where kubeadm finds this node's own changes to what it
// renders: the kubelet's provider ID (the KubeletConfiguration is the
// cluster's, one for every node).
type patches struct {
	Directory string `json:"directory"`
}

type bootstrapToken struct {
	Token       string   `json:"token"`
	Description string   `json:"description,omitempty"`
	TTL         string   `json:"ttl,omitempty"`
	Usages      []string `json:"usages"`
	Groups      []string `json:"groups"`
}

type nodeRegistration struct {
	Name             string `json:"name"`
	CRISocket        string `json:"criSocket"`
	KubeletExtraArgs []arg  `json:"kubeletExtraArgs,omitempty"`
}

type arg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// kubeletConfiguration is the cluster's KubeletConfiguration, which
// kubeadm uploads for every node's kubelet (kubelet.config.k8s.io/v1beta1).
type kubeletConfiguration struct {
	typeMeta
	// CgroupDriver matches containerd's (SystemdCgroup in the image's
	// config.toml).
	CgroupDriver string `json:"cgroupDriver"`
	// FailCgroupV1 false: the kubelet runs on a host with the cgroup v1
	// layout too (the lab's); Kubernetes 1.35 turns the default to true.
	FailCgroupV1 bool `json:"failCgroupV1"`
	// ResolvConf is the resolver pods with dnsPolicy Default (CoreDNS
	// among them) get: the one the agent writes from guestinfo, the image
	// having no systemd-resolved.
	ResolvConf string `json:"resolvConf"`
	// ServerTLSBootstrap: the kubelet asks the cluster CA for its serving
	// certificate, and again before it expires, instead of signing one
	// itself for a year; the masters' agents approve the requests
	// (servingcerts.go), and the apiserver verifies it
	// (--kubelet-certificate-authority).
	ServerTLSBootstrap bool `json:"serverTLSBootstrap"`
	RotateCertificates bool `json:"rotateCertificates"`
}

type apiEndpoint struct {
	AdvertiseAddress string `json:"advertiseAddress"`
	BindPort         int    `json:"bindPort"`
}

type clusterConfiguration struct {
	typeMeta
	ClusterName          string     `json:"clusterName"`
	KubernetesVersion    string     `json:"kubernetesVersion"`
	ControlPlaneEndpoint string     `json:"controlPlaneEndpoint"`
	CertificatesDir      string     `json:"certificatesDir"`
	Networking           networking `json:"networking"`
	Etcd                 etcd       `json:"etcd"`
	APIServer            apiServer  `json:"apiServer"`
	// ControllerManager and Scheduler serve no profiling, and carry in
	// their environment what restarts them after an etcd restore
	// (EtcdRestoredEnv) or a renewal of their certificates
	// (CertsRenewedEnv).
	ControllerManager controlPlaneComponent `json:"controllerManager"`
	Scheduler         controlPlaneComponent `json:"scheduler"`
	// Proxy is disabled: kube-proxy runs as a unit of every node
	// (agent/components/kubeproxy). Said here, in the configuration
	// kubeadm uploads, so that a join's preflight does not look for
	// kube-proxy's image and an upgrade does not install its DaemonSet.
	Proxy disabled `json:"proxy"`
}

type disabled struct {
	Disabled bool `json:"disabled"`
}

type networking struct {
	PodSubnet     string `json:"podSubnet,omitempty"`
	ServiceSubnet string `json:"serviceSubnet"`
	DNSDomain     string `json:"dnsDomain"`
}

type etcd struct {
	External externalEtcd `json:"external"`
}

type externalEtcd struct {
	Endpoints []string `json:"endpoints"`
	CAFile    string   `json:"caFile"`
	CertFile  string   `json:"certFile"`
	KeyFile   string   `json:"keyFile"`
}

type apiServer struct {
	CertSANs     []string        `json:"certSANs"`
	ExtraArgs    []arg           `json:"extraArgs,omitempty"`
	ExtraEnvs    []envVar        `json:"extraEnvs,omitempty"`
	ExtraVolumes []hostPathMount `json:"extraVolumes,omitempty"`
}

// hostPathMount is a file or directory of the master mounted into a
// control-plane pod.
type hostPathMount struct {
	Name      string `json:"name"`
	HostPath  string `json:"hostPath"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
	PathType  string `json:"pathType,omitempty"`
}

// controlPlaneComponent is the controller manager's or the scheduler's
// part of the ClusterConfiguration.
type controlPlaneComponent struct {
	ExtraArgs []arg    `json:"extraArgs,omitempty"`
	ExtraEnvs []envVar `json:"extraEnvs,omitempty"`
}

// noProfiling turns off a control-plane component's /debug/pprof, which
// kubeadm leaves on (the CIS benchmark's --profiling=false): it tells
// anyone allowed to read it much about the process, and costs to serve.
var noProfiling = arg{Name: "profiling", Value: "false"}

type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// EtcdRestoredEnv carries, in the environment of the control plane's
// pods, the newest etcd restore the local member took part in: a new
// value changes their manifests, and the kubelet restarts them. They must
// restart: their caches hold revisions newer than the restored keyspace,
// and etcd 3.4 cannot bump its revision past them.
const EtcdRestoredEnv = "HARMONY_ETCD_RESTORED"

type joinConfiguration struct {
	typeMeta
	NodeRegistration nodeRegistration  `json:"nodeRegistration"`
	CACertPath       string            `json:"caCertPath"`
	Discovery        discovery         `json:"discovery"`
	ControlPlane     *joinControlPlane `json:"controlPlane,omitempty"`
	Timeouts         joinTimeouts      `json:"timeouts"`
	Patches          *patches          `json:"patches,omitempty"`
}

// joinTimeouts bound a join's waits (kubeadm's discovery default is 5m).
// A join that times out is retried on the next pass; meanwhile the other
// components' passes are not held up for long.
type joinTimeouts struct {
	Discovery string `json:"discovery"`
}

type discovery struct {
	BootstrapToken    bootstrapTokenDiscovery `json:"bootstrapToken"`
	TLSBootstrapToken string                  `json:"tlsBootstrapToken"`
}

type bootstrapTokenDiscovery struct {
	Token             string   `json:"token"`
	APIServerEndpoint string   `json:"apiServerEndpoint"`
	CACertHashes      []string `json:"caCertHashes"`
}

type joinControlPlane struct {
	LocalAPIEndpoint apiEndpoint `json:"localAPIEndpoint"`
}

// Defaults kubeadm would pick; the component writes them out, so that what
// the files say is what runs.
const (
	defaultServiceSubnet = "10.96.0.0/12"
	defaultDNSDomain     = "cluster.local"
	// criSocket is set rather than detected: detection probes sockets and
	// would make validation depend on the host.
	criSocket = "unix:///var/run/containerd/containerd.sock"
	// tokenTTL: the first master re-runs bootstrap-token well within it
	// (clusterPhasesRefresh), so the role's token lives as long as the
	// role carries it and dies a day after it leaves.
	tokenTTL = "24h0m0s"
)

// plan is everything the component derives from a role, checked.
type plan struct {
	nodeName  string
	master    bool
	first     bool // the master with the lowest rank
	advertise netip.Addr
	// endpoint is VIP:FrontendPort, where HAProxy serves the API.
	endpoint string
	version  string
	token    string
	// serviceSubnet is the effective one (kubeadm's default when unset).
	serviceSubnet netip.Prefix
	certSANs      []string
	// caHash is kubeadm's discovery pin of the cluster CA.
	caHash string
	// providerID is the kubelet's, from the role; empty when it has none.
	providerID string
	// etcdRestored is the newest etcd restore the local member took part
	// in (Config.EtcdRestored); empty when none.
	etcdRestored string
	// certsRenewed is when this master last renewed its certificates
	// (certsRenewed); empty when never.
	certsRenewed string
}

// vipEndpoint is the cluster's VIP and VIP:frontendPort, where HAProxy
// serves the cluster's API.
func vipEndpoint(role *v1.Role, frontendPort int) (netip.Addr, string, error) {
	vip, err := netip.ParseAddr(role.Cluster.VIP)
	if err != nil {
		return netip.Addr{}, "", fmt.Errorf("cluster.vip: empty or not an address; the API endpoint is VIP:%d", frontendPort)
	}
	return vip, net.JoinHostPort(vip.String(), fmt.Sprint(frontendPort)), nil
}

// newPlan checks what the role must carry for this node and derives the
// rest. defaultVersion is kubeadm's own version, used when the role names
// none. Errors name the role field.
func newPlan(role *v1.Role, facts []netip.Addr, frontendPort int, defaultVersion string) (*plan, error) {
	p := &plan{nodeName: role.NodeName, master: role.Role == v1.RoleMaster, providerID: role.ProviderID}
	if role.Kubeadm != nil {
		p.token = role.Kubeadm.BootstrapToken
	}

	vip, endpoint, err := vipEndpoint(role, frontendPort)
	if err != nil {
		return nil, err
	}
	p.endpoint = endpoint

	p.version = role.KubernetesVersion()
	if p.version == "" {
		p.version = defaultVersion
	}

	p.serviceSubnet = netip.MustParsePrefix(defaultServiceSubnet)
	if role.Cluster.ServiceCIDR != "" {
		// api/v1 validated it.
		p.serviceSubnet = netip.MustParsePrefix(role.Cluster.ServiceCIDR)
	}

	p.advertise, err = nodeAddress(role, facts)
	if err != nil {
		return nil, err
	}

	if role.PKI == nil || role.PKI.ClusterCA == nil || role.PKI.ClusterCA.Certificate == "" {
		return nil, errors.New("pki.clusterCA.certificate: empty; every node needs the cluster CA")
	}
	certs, err := v1.ParseCertificatesPEM([]byte(role.PKI.ClusterCA.Certificate))
	if err != nil {
		return nil, fmt.Errorf("pki.clusterCA.certificate: %w", err)
	}
	p.caHash = caCertHash(certs[0])

	if !p.master {
		if p.token == "" {
			return nil, errors.New("kubeadm.bootstrapToken: empty; a worker joins with it")
		}
		return p, nil
	}

	p.first, err = isFirstMaster(role)
	if err != nil {
		return nil, err
	}
	for _, kp := range []struct {
		field string
		pair  *v1.KeyPair
	}{{"pki.clusterCA", role.PKI.ClusterCA}, {"pki.frontProxyCA", role.PKI.FrontProxyCA}, {"pki.etcdCA", role.PKI.EtcdCA}} {
		if kp.pair == nil || kp.pair.Certificate == "" || kp.pair.Key == "" {
			return nil, fmt.Errorf("%s: a master needs the certificate and its key", kp.field)
		}
	}
	if role.PKI.ServiceAccountKey == "" {
		return nil, errors.New("pki.serviceAccountKey: empty; a master needs it")
	}
	p.certSANs = appendUnique(nil, vip.String())
	for _, ip := range role.Addresses.IPs {
		p.certSANs = appendUnique(p.certSANs, netip.MustParseAddr(ip).String())
	}
	p.certSANs = appendUnique(p.certSANs, p.advertise.String(), role.NodeName)
	for _, name := range role.Addresses.DNSNames {
		p.certSANs = appendUnique(p.certSANs, name)
	}
	return p, nil
}

// nodeAddress is the address the apiserver advertises and a joining node
// registers: the role's first address, else this node's peer entry, else
// the primary interface's first address.
func nodeAddress(role *v1.Role, facts []netip.Addr) (netip.Addr, error) {
	if len(role.Addresses.IPs) > 0 {
		return netip.MustParseAddr(role.Addresses.IPs[0]), nil
	}
	for _, p := range role.Peers {
		if p.Name == role.NodeName {
			return netip.MustParseAddr(p.Address), nil
		}
	}
	for _, a := range facts {
		if a.IsGlobalUnicast() {
			return a, nil
		}
	}
	return netip.Addr{}, errors.New("addresses.ips: empty, the node is not in peers and has no address of its own to advertise")
}

// isFirstMaster reports whether this node is the master peer with the
// lowest rank (ties broken by name). A role without master peers is a
// single master.
func isFirstMaster(role *v1.Role) (bool, error) {
	var masters []v1.Peer
	self := false
	for _, p := range role.Peers {
		if p.Role != v1.RoleMaster {
			continue
		}
		masters = append(masters, p)
		self = self || p.Name == role.NodeName
	}
	if len(masters) == 0 {
		return true, nil
	}
	if !self {
		return false, fmt.Errorf("peers: this master (%q) is not among the master peers", role.NodeName)
	}
	first := slices.MinFunc(masters, func(a, b v1.Peer) int {
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return strings.Compare(a.Name, b.Name)
	})
	return first.Name == role.NodeName, nil
}

// caCertHash is kubeadm's --discovery-token-ca-cert-hash: the SHA-256 of
// the CA's SubjectPublicKeyInfo.
func caCertHash(ca *x509.Certificate) string {
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// renderInit is the InitConfiguration and ClusterConfiguration every
// master runs its local phases with (and the first master its cluster
// phases). The bootstrap token is only on the first master, which creates
// it.
func renderInit(role *v1.Role, p *plan, apiPort int) ([]byte, error) {
	ic := initConfiguration{
		typeMeta:         typeMeta{APIVersion: kubeadmAPIVersion, Kind: "InitConfiguration"},
		NodeRegistration: registration(p),
		LocalAPIEndpoint: apiEndpoint{AdvertiseAddress: p.advertise.String(), BindPort: apiPort},
		Patches:          p.patches(),
	}
	if p.first && p.token != "" {
		ic.BootstrapTokens = []bootstrapToken{{
			Token:       p.token,
			Description: "harmony: lets the cluster's nodes join",
			TTL:         tokenTTL,
			Usages:      []string{"signing", "authentication"},
			Groups:      []string{"system:bootstrappers:kubeadm:default-node-token"},
		}}
	}
	dnsDomain := role.Cluster.DNSDomain
	if dnsDomain == "" {
		dnsDomain = defaultDNSDomain
	}
	cc := clusterConfiguration{
		typeMeta:             typeMeta{APIVersion: kubeadmAPIVersion, Kind: "ClusterConfiguration"},
		ClusterName:          role.Cluster.Name,
		KubernetesVersion:    p.version,
		ControlPlaneEndpoint: p.endpoint,
		CertificatesDir:      PKIDir,
		Networking: networking{
			PodSubnet:     role.Cluster.PodCIDR,
			ServiceSubnet: p.serviceSubnet.String(),
			DNSDomain:     dnsDomain,
		},
		Etcd: etcd{External: externalEtcd{
			Endpoints: []string{EtcdEndpoint},
			CAFile:    EtcdCAFile,
			CertFile:  EtcdClientCertFile,
			KeyFile:   EtcdClientKeyFile,
		}},
		APIServer: apiServer{CertSANs: p.certSANs,
			ExtraArgs: append([]arg{
				// The kubelets' serving certificates are the cluster CA's
				// (ServerTLSBootstrap): logs, exec and port-forward check them.
				{Name: "kubelet-certificate-authority", Value: CACertFile},
				noProfiling,
			}, auditLogArgs...),
			ExtraEnvs:    []envVar{{Name: AuditPolicyEnv, Value: auditPolicyDigest()}},
			ExtraVolumes: auditVolumes,
		},
		ControllerManager: controlPlaneComponent{ExtraArgs: []arg{noProfiling}},
		Scheduler:         controlPlaneComponent{ExtraArgs: []arg{noProfiling}},
		Proxy:             disabled{Disabled: true},
	}
	env := p.controlPlaneEnv()
	cc.APIServer.ExtraEnvs = append(cc.APIServer.ExtraEnvs, env...)
	cc.ControllerManager.ExtraEnvs = env
	cc.Scheduler.ExtraEnvs = env
	kc := kubeletConfiguration{
		typeMeta:           typeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		CgroupDriver:       "systemd",
		ResolvConf:         "/etc/resolv.conf",
		ServerTLSBootstrap: true,
		RotateCertificates: true,
	}
	return marshalDocs(ic, cc, kc)
}

// controlPlaneEnv is what the control plane's pods carry in their
// environment only to be restarted when it changes.
func (p *plan) controlPlaneEnv() []envVar {
	var env []envVar
	if p.etcdRestored != "" {
		env = append(env, envVar{Name: EtcdRestoredEnv, Value: p.etcdRestored})
	}
	if p.certsRenewed != "" {
		env = append(env, envVar{Name: CertsRenewedEnv, Value: p.certsRenewed})
	}
	return env
}

// patches is the configurations' patches directory, when the node has a
// patch.
func (p *plan) patches() *patches {
	if p.providerID == "" {
		return nil
	}
	return &patches{Directory: PatchesDir}
}

// kubeletPatch is the node's patch of the cluster's
// KubeletConfiguration (kubeadm's "kubeletconfiguration" target, a JSON
// merge patch), or nil.
func kubeletPatch(p *plan) ([]byte, error) {
	if p.providerID == "" {
		return nil, nil
	}
	return yaml.Marshal(map[string]string{"providerID": p.providerID})
}

// registration is how this node registers: its name, the runtime, and
// its address from the role, so that the kubelet does not guess among the
// node's interfaces (a VIP, a pod bridge).
func registration(p *plan) nodeRegistration {
	return nodeRegistration{Name: p.nodeName, CRISocket: criSocket,
		KubeletExtraArgs: []arg{{Name: "node-ip", Value: p.advertise.String()}}}
}

// renderJoin is the JoinConfiguration: bootstrap-token discovery against
// the VIP, pinned to the cluster CA; control-plane for masters.
func renderJoin(p *plan, apiPort int) ([]byte, error) {
	jc := joinConfiguration{
		typeMeta:         typeMeta{APIVersion: kubeadmAPIVersion, Kind: "JoinConfiguration"},
		NodeRegistration: registration(p),
		CACertPath:       CACertFile,
		Discovery: discovery{
			BootstrapToken: bootstrapTokenDiscovery{
				Token:             p.token,
				APIServerEndpoint: p.endpoint,
				CACertHashes:      []string{p.caHash},
			},
			TLSBootstrapToken: p.token,
		},
		Timeouts: joinTimeouts{Discovery: "2m0s"},
		Patches:  p.patches(),
	}
	if p.master {
		jc.ControlPlane = &joinControlPlane{LocalAPIEndpoint: apiEndpoint{AdvertiseAddress: p.advertise.String(), BindPort: apiPort}}
	}
	return marshalDocs(jc)
}

func marshalDocs(docs ...any) ([]byte, error) {
	var out []byte
	for i, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("render kubeadm configuration: %w", err)
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out, nil
}

func appendUnique(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}
