package v1

import (
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/harmonykaas/harmony/internal/lazyregexp"
)

// Paths of the infrastructure and cluster API.
const (
	PathProviders  = "/api/v1/providers"
	PathImages     = "/api/v1/images"
	PathClusters   = "/api/v1/clusters"
	PathOperations = "/api/v1/operations"
	// PathLeftovers lists what deleted clusters left (ClusterLeftovers).
	PathLeftovers = "/api/v1/leftovers"
	PathOpenAPI   = "/api/v1/openapi.json"
)

// MaxIPPoolAddresses bounds an IP pool, so that free-address counting and
// allocation stay cheap.
const MaxIPPoolAddresses = 1 << 16

// Provider is one slice of a vCenter that clusters are built in: where
// VMs go, which datastores hold their disks, which port group they use and,
// optionally, the static addresses they get.
type Provider struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Name       string  `json:"name"`
	VCenter    VCenter `json:"vcenter"`
	// Datacenter is a name or inventory path.
	Datacenter string `json:"datacenter"`
	// ComputeCluster is a vSphere cluster; its root resource pool is used
	// unless ResourcePool names another. One of the two is required.
	ComputeCluster string `json:"computeCluster,omitempty"`
	ResourcePool   string `json:"resourcePool,omitempty"`
	// Folder is the VM folder under which each cluster gets its own; it is
	// created if missing.
	Folder     string     `json:"folder"`
	Datastores Datastores `json:"datastores"`
	// Network is the port group every VM's NIC is connected to.
	Network string  `json:"network"`
	IPPool  *IPPool `json:"ipPool,omitempty"`

	CreatedAt time.Time `json:"createdAt,omitzero"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// VCenter is how the controller reaches vCenter. The password is write
// only: the controller keeps it as a secret and never returns it.
type VCenter struct {
	URL      string `json:"url"`
	Username string `json:"username"`
	Password string `json:"password,omitempty"`
	// Thumbprint pins vCenter's certificate (SHA-1 or SHA-256, hex with
	// colons); without it the system roots must trust vCenter.
	Thumbprint string `json:"thumbprint,omitempty"`
	// Insecure skips certificate verification. For labs only.
	Insecure bool `json:"insecure,omitempty"`
}

// Datastores place disks. OS disks and data disks may use different
// datastores; Data defaults to OS. Each disk goes to the listed datastore
// with the most free space.
type Datastores struct {
	OS   []string `json:"os"`
	Data []string `json:"data,omitempty"`
}

// IPPool is the static addressing a provider hands out: every node and
// every cluster VIP comes from Ranges, inside Network.
type IPPool struct {
	// Network is the subnet in CIDR form, e.g. 198.18.10.0/24.
	Network string `json:"network"`
	// Ranges are "first-last" or single addresses inside Network.
	Ranges  []string `json:"ranges"`
	Gateway string   `json:"gateway"`
	DNS     []string `json:"dns,omitempty"`
}

// ProviderList answers GET PathProviders.
type ProviderList struct {
	Items []Provider `json:"items"`
}

// Redacted returns the provider as the API shows it: without the password.
func (p Provider) Redacted() Provider {
	p.VCenter.Password = ""
	return p
}

var (
	thumbprintPattern = lazyregexp.New(`^([0-9A-Fa-f]{2}:){19}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$`)
	// inventoryPattern allows vSphere inventory names and paths, but no
	// wildcards (a provider names exactly one object) and no control
	// characters.
	inventoryPattern = lazyregexp.New(`^[^*?\[\]\x00-\x1f]{1,255}$`)
)

// DecodeProvider reads and validates a provider document.
func DecodeProvider(r io.Reader) (*Provider, error) {
	var p Provider
	if err := decodeStrict(r, MaxAdminBytes, &p); err != nil {
		return nil, err
	}
	return &p, p.Validate()
}

// Validate checks every field and names the first one that is wrong. A
// missing password is allowed: applying a provider again keeps the stored
// one.
func (p *Provider) Validate() error {
	if p.APIVersion != APIVersion {
		return fieldErr("apiVersion", "must be %q, got %q", APIVersion, p.APIVersion)
	}
	if p.Kind != "Provider" {
		return fieldErr("kind", "must be \"Provider\", got %q", p.Kind)
	}
	if !labelPattern.MatchString(p.Name) {
		return fieldErr("name", "%q is not a lowercase DNS label", p.Name)
	}
	if err := p.VCenter.validate("vcenter"); err != nil {
		return err
	}
	for _, f := range []struct {
		name, value string
		required    bool
	}{
		{"datacenter", p.Datacenter, true}, {"computeCluster", p.ComputeCluster, false},
		{"resourcePool", p.ResourcePool, false}, {"folder", p.Folder, true}, {"network", p.Network, true},
	} {
		if f.value == "" {
			if f.required {
				return fieldErr(f.name, "is required")
			}
			continue
		}
		if !inventoryPattern.MatchString(f.value) {
			return fieldErr(f.name, "%q is not a vSphere inventory name or path (no wildcards, at most 255 characters)", f.value)
		}
	}
	if p.ComputeCluster == "" && p.ResourcePool == "" {
		return fieldErr("computeCluster", "computeCluster or resourcePool is required")
	}
	if len(p.Datastores.OS) == 0 {
		return fieldErr("datastores.os", "at least one datastore is required")
	}
	for _, list := range []struct {
		name  string
		names []string
	}{{"datastores.os", p.Datastores.OS}, {"datastores.data", p.Datastores.Data}} {
		if len(list.names) > 32 {
			return fieldErr(list.name, "at most 32 datastores")
		}
		seen := map[string]bool{}
		for i, ds := range list.names {
			if !inventoryPattern.MatchString(ds) || strings.Contains(ds, "/") {
				return fieldErr(fmt.Sprintf("%s[%d]", list.name, i), "%q is not a datastore name", ds)
			}
			if seen[ds] {
				return fieldErr(fmt.Sprintf("%s[%d]", list.name, i), "%q appears twice", ds)
			}
			seen[ds] = true
		}
	}
	if p.IPPool != nil {
		if _, err := p.IPPool.Addresses(); err != nil {
			return err
		}
	}
	return nil
}

// DataDatastores are the datastores for data disks.
func (p *Provider) DataDatastores() []string {
	if len(p.Datastores.Data) > 0 {
		return p.Datastores.Data
	}
	return p.Datastores.OS
}

func (v *VCenter) validate(f string) error {
	u, err := url.Parse(v.URL)
	switch {
	case v.URL == "":
		return fieldErr(f+".url", "is required")
	case err != nil || u.Host == "":
		return fieldErr(f+".url", "%q is not a URL such as https://vcenter.example.com/sdk", v.URL)
	case u.Scheme != "https":
		return fieldErr(f+".url", "must use https, got %q", u.Scheme)
	case u.User != nil:
		// Credentials in a URL end up in logs and listings.
		return fieldErr(f+".url", "must not carry credentials; use username and password")
	case u.RawQuery != "" || u.Fragment != "":
		return fieldErr(f+".url", "must not have a query or fragment")
	}
	if v.Username == "" || len(v.Username) > 256 || strings.ContainsAny(v.Username, "\x00\r\n") {
		return fieldErr(f+".username", "is required: 1 to 256 characters without control characters")
	}
	if len(v.Password) > 1024 {
		return fieldErr(f+".password", "is longer than 1024 characters")
	}
	if v.Thumbprint != "" && !thumbprintPattern.MatchString(v.Thumbprint) {
		return fieldErr(f+".thumbprint", "must be a SHA-1 or SHA-256 fingerprint as colon-separated hex")
	}
	if v.Thumbprint != "" && v.Insecure {
		return fieldErr(f+".insecure", "contradicts thumbprint: pin the certificate or skip verification, not both")
	}
	return nil
}

// Addresses validates the pool and returns its addresses in order.
func (p *IPPool) Addresses() ([]netip.Addr, error) {
	network, err := netip.ParsePrefix(p.Network)
	if err != nil || network.Masked() != network || !network.Addr().Is4() {
		return nil, fieldErr("ipPool.network", "%q is not an IPv4 network in CIDR form", p.Network)
	}
	gw, err := netip.ParseAddr(p.Gateway)
	if err != nil || !network.Contains(gw) {
		return nil, fieldErr("ipPool.gateway", "%q is not an address in %s", p.Gateway, network)
	}
	if len(p.DNS) > 8 {
		return nil, fieldErr("ipPool.dns", "at most 8 servers")
	}
	for i, d := range p.DNS {
		if a, err := netip.ParseAddr(d); err != nil || !a.Is4() {
			return nil, fieldErr(fmt.Sprintf("ipPool.dns[%d]", i), "%q is not an IPv4 address", d)
		}
	}
	if len(p.Ranges) == 0 {
		return nil, fieldErr("ipPool.ranges", "at least one range is required")
	}
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for i, r := range p.Ranges {
		f := fmt.Sprintf("ipPool.ranges[%d]", i)
		first, last, ok := strings.Cut(r, "-")
		if !ok {
			last = first
		}
		a, err1 := netip.ParseAddr(strings.TrimSpace(first))
		b, err2 := netip.ParseAddr(strings.TrimSpace(last))
		if err1 != nil || err2 != nil || !network.Contains(a) || !network.Contains(b) || b.Less(a) {
			return nil, fieldErr(f, "%q is not an address or first-last range inside %s", r, network)
		}
		for x := a; ; x = x.Next() {
			switch {
			case x == network.Addr() || x == lastAddr(network):
				return nil, fieldErr(f, "%q includes %s, the network or broadcast address", r, x)
			case x == gw:
				return nil, fieldErr(f, "%q includes the gateway %s", r, gw)
			case seen[x]:
				return nil, fieldErr(f, "%q overlaps another range at %s", r, x)
			}
			seen[x] = true
			out = append(out, x)
			if len(out) > MaxIPPoolAddresses {
				return nil, fieldErr("ipPool.ranges", "more than %d addresses", MaxIPPoolAddresses)
			}
			if x == b {
				break
			}
		}
	}
	return out, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	bits := p.Bits()
	for i := range 4 {
		for b := range 8 {
			if i*8+b >= bits {
				a[i] |= 0x80 >> b
			}
		}
	}
	return netip.AddrFrom4(a)
}
