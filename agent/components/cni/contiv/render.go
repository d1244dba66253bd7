package contiv

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/harmonykaas/harmony/agent/components/cni/plugin"
	"github.com/harmonykaas/harmony/agent/pki"
	"github.com/harmonykaas/harmony/agent/reconcile"
	"github.com/harmonykaas/harmony/agent/service"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

// ConfListRule is what the Contiv network configuration must be.
var ConfListRule = plugin.ConfListRule{CNIVersion: cniVersion, Name: networkName, Types: []string{cniType}}

// Plan implements plugin.Plugin.
func (p *Plugin) Plan(host *reconcile.Host, role *v1.Role) (*plugin.Plan, error) {
	in, err := p.params(host, role)
	if err != nil {
		return nil, err
	}
	plan := &plugin.Plan{}

	conflist, err := RenderConfList()
	if err != nil {
		return nil, err
	}
	plan.Files = append(plan.Files, plugin.File{Path: ConfListPath, Data: conflist, Mode: 0o644,
		Validate: plugin.ConfListValidator(ConfListRule)})

	k8s, err := renderK8sConfig(K8sConfig{
		APIServer: in.apiServer, CA: host.Path(K8sCAPath), Cert: host.Path(K8sCertPath), Key: host.Path(K8sKeyPath),
		ServiceSubnet: in.svcCIDR.String(),
	})
	if err != nil {
		return nil, err
	}
	agents := []string{NetpluginUnit}
	if in.master {
		agents = append(agents, NetmasterUnit)
	}
	plan.Files = append(plan.Files, plugin.File{Path: K8sConfigPath, Data: k8s, Mode: 0o600,
		Validate: validateK8sConfig, Units: agents})

	// Credentials: the CA certificates are written from the role, the
	// client certificates issued from the role's CAs where it carries
	// their keys (masters).
	var pkiIn *v1.ClusterPKI
	if role.PKI != nil {
		pkiIn = role.PKI
	} else {
		pkiIn = &v1.ClusterPKI{}
	}
	if ca := pkiIn.ClusterCA; ca != nil {
		plan.Files = append(plan.Files, plugin.File{Path: K8sCAPath, Data: []byte(ca.Certificate), Mode: 0o644,
			Validate: validateCACert, Units: agents})
		plan.Certs = append(plan.Certs, plugin.Cert{CA: ca, CertPath: K8sCertPath, KeyPath: K8sKeyPath,
			Leaf: pki.Leaf{
				// RBAC binds the group to Contiv's cluster role.
				CommonName: "contiv:" + in.node, Organization: []string{"harmony:contiv"},
				Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			},
			Units: agents})
	} else {
		plan.Missing = append(plan.Missing, "the cluster CA (pki.clusterCA), with which netplugin verifies the apiserver")
	}
	if ca := pkiIn.EtcdCA; ca != nil {
		plan.Files = append(plan.Files, plugin.File{Path: EtcdCAPath, Data: []byte(ca.Certificate), Mode: 0o644,
			Validate: validateCACert, Units: []string{EtcdProxyUnit}})
		plan.Certs = append(plan.Certs, plugin.Cert{CA: ca, CertPath: EtcdCertPath, KeyPath: EtcdKeyPath,
			Leaf:  pki.Leaf{CommonName: "contiv:" + in.node, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
			Units: []string{EtcdProxyUnit}})
	} else {
		plan.Missing = append(plan.Missing, "the etcd CA (pki.etcdCA), with which Contiv's store proxy reaches the masters' etcd")
	}

	if in.master {
		spec := networkSpecFor(in)
		data, err := renderNetworkSpec(spec)
		if err != nil {
			return nil, err
		}
		plan.Files = append(plan.Files, plugin.File{Path: NetworkPath, Data: data, Mode: 0o644, Validate: validateNetworkSpec})
		api := newNetmasterAPI("http://" + netipLoopback(p.cfg.NetmasterPort))
		plan.Apply = api.applyFunc(spec)
	}

	plan.Dirs = []string{EtcdProxyDir}
	plan.Units = p.units(host, in)
	plan.Binaries = []string{p.cfg.EtcdBinary, p.cfg.NetpluginBinary, p.cfg.CNIBinary}
	if in.master {
		plan.Binaries = append(plan.Binaries, p.cfg.NetmasterBinary)
	}
	return plan, nil
}

func netipLoopback(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// storeURL is where netplugin and netmaster find their store: the local
// etcd v2 proxy.
func (p *Plugin) storeURL() string { return "http://" + netipLoopback(p.cfg.EtcdProxyPort) }

// units are this node's daemons, in start order: the store proxy, then
// netmaster (masters), then netplugin. None of them re-reads its files on
// a signal, so a changed file restarts them.
func (p *Plugin) units(host *reconcile.Host, in params) []service.Unit {
	proxy := service.Unit{Name: EtcdProxyUnit, Command: []string{p.cfg.EtcdBinary,
		"--proxy", "on",
		"--name", "contiv-proxy-" + in.node,
		"--data-dir", host.Path(EtcdProxyDir),
		"--listen-client-urls", p.storeURL(),
		"--initial-cluster", strings.Join(in.etcdPeers, ","),
		// In proxy mode the client TLS flags are what the proxy presents to
		// the members' client URLs, the peer ones what it presents when it
		// asks their peer URLs for the member list.
		"--cert-file", host.Path(EtcdCertPath),
		"--key-file", host.Path(EtcdKeyPath),
		"--trusted-ca-file", host.Path(EtcdCAPath),
		"--peer-cert-file", host.Path(EtcdCertPath),
		"--peer-key-file", host.Path(EtcdKeyPath),
		"--peer-trusted-ca-file", host.Path(EtcdCAPath),
	}}
	common := []string{
		"--mode", "kubernetes",
		"--netmode", "vxlan",
		// Contiv 1.2 refuses vxlan with bridge forwarding.
		"--fwdmode", "routing",
		"--etcd-endpoints", p.storeURL(),
	}
	units := []service.Unit{proxy}
	if in.master {
		units = append(units, service.Unit{Name: NetmasterUnit, Command: append(append([]string{p.cfg.NetmasterBinary}, common...),
			// The API on loopback for the agent and netctl; the control
			// address, on the node's address, for leader election and the
			// other netmasters.
			"--listen-url", netipLoopback(p.cfg.NetmasterPort),
			"--control-url", in.vtep.String()+":"+strconv.Itoa(p.cfg.NetmasterPort),
		)})
	}
	units = append(units, service.Unit{Name: NetpluginUnit, Command: append(append([]string{p.cfg.NetpluginBinary}, common...),
		"--vtep-ip", in.vtep.String(),
		"--ctrl-ip", in.vtep.String(),
		// Contiv matches pods to nodes by this label.
		"--host", in.node,
		"--vxlan-port", strconv.Itoa(vxlanPort),
	)})
	return units
}

// RenderConfList returns the network configuration list: contivk8s alone,
// which gets the pod's address from the local netplugin.
func RenderConfList() ([]byte, error) {
	list := map[string]any{
		"cniVersion": cniVersion,
		"name":       networkName,
		"plugins":    []map[string]any{{"type": cniType}},
	}
	return marshal(list)
}

// K8sConfig is contiv.json, the Kubernetes client settings of netplugin
// and netmaster (Contiv's k8sutils.ContivConfig). Contiv 1.2's netplugin
// authenticates with the client certificate; its netmaster accepts only a
// bearer token (K8S_TOKEN), which the role does not carry.
type K8sConfig struct {
	APIServer     string `json:"K8S_API_SERVER"`
	CA            string `json:"K8S_CA"`
	Cert          string `json:"K8S_CERT"`
	Key           string `json:"K8S_KEY"`
	ServiceSubnet string `json:"SVC_SUBNET"`
}

func renderK8sConfig(c K8sConfig) ([]byte, error) { return marshal(c) }

// validateK8sConfig checks a candidate contiv.json.
func validateK8sConfig(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var c K8sConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("contiv.json: %w", err)
	}
	u, err := url.Parse(c.APIServer)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Port() == "" {
		return fmt.Errorf("contiv.json: K8S_API_SERVER %q is not https://host:port", c.APIServer)
	}
	for _, f := range []struct{ name, value string }{{"K8S_CA", c.CA}, {"K8S_CERT", c.Cert}, {"K8S_KEY", c.Key}} {
		if !filepath.IsAbs(f.value) {
			return fmt.Errorf("contiv.json: %s %q is not an absolute path", f.name, f.value)
		}
	}
	if _, err := parseIPv4Prefix(c.ServiceSubnet); err != nil {
		return fmt.Errorf("contiv.json: SVC_SUBNET: %w", err)
	}
	return nil
}

func validateCACert(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	certs, err := v1.ParseCertificatesPEM(data)
	if err != nil {
		return err
	}
	if !certs[0].IsCA {
		return fmt.Errorf("%s is not a CA certificate", certs[0].Subject)
	}
	return nil
}

var marshal = plugin.MarshalJSON
