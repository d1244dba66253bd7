package contiv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Global is Contiv's cluster-wide settings object (contivModel.Global),
// with the fields the plan sets.
type Global struct {
	Key              string `json:"key"`
	Name             string `json:"name"`
	ArpMode          string `json:"arpMode"`
	FwdMode          string `json:"fwdMode"`
	NetworkInfraType string `json:"networkInfraType"`
	PvtSubnet        string `json:"pvtSubnet"`
	Vlans            string `json:"vlans"`
	Vxlans           string `json:"vxlans"`
}

// Network is a Contiv network (contivModel.Network), with the fields the
// plan sets. For VXLAN encapsulation PktTag is the VNI.
type Network struct {
	Key         string `json:"key"`
	TenantName  string `json:"tenantName"`
	NetworkName string `json:"networkName"`
	NwType      string `json:"nwType"`
	Encap       string `json:"encap"`
	PktTag      int    `json:"pktTag"`
	Subnet      string `json:"subnet"`
	Gateway     string `json:"gateway"`
}

// NetworkSpec is network.json: what netmaster must hold.
type NetworkSpec struct {
	Global  Global  `json:"global"`
	Network Network `json:"network"`
}

func networkSpecFor(in params) NetworkSpec {
	return NetworkSpec{
		Global: Global{
			Key: "global", Name: "global",
			ArpMode: "proxy", FwdMode: "routing", NetworkInfraType: "default",
			PvtSubnet: hostPrivateSubnet, Vlans: "1-4094", Vxlans: vxlanRange(in.vni),
		},
		Network: Network{
			Key: tenant + ":" + podNetwork, TenantName: tenant, NetworkName: podNetwork,
			NwType: "data", Encap: "vxlan", PktTag: in.vni,
			Subnet: in.podCIDR.String(), Gateway: in.gateway.String(),
		},
	}
}

func renderNetworkSpec(s NetworkSpec) ([]byte, error) { return marshal(s) }

// Contiv's own format rules (contivmodel), so that netmaster is never
// handed what it would refuse.
var (
	contivName  = regexp.MustCompile(`^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9\-]*[a-zA-Z0-9])\.)*([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9\-]*[A-Za-z0-9])$`)
	contivRange = regexp.MustCompile(`^([0-9]{1,8})-([0-9]{1,8})$`)
)

// validateNetworkSpec checks a candidate network.json.
func validateNetworkSpec(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var s NetworkSpec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("network.json: %w", err)
	}
	return s.validate()
}

func (s NetworkSpec) validate() error {
	g, n := s.Global, s.Network
	if g.Name != "global" || g.Key != g.Name {
		return fmt.Errorf("global: name and key must be \"global\"")
	}
	switch {
	case g.ArpMode != "proxy" && g.ArpMode != "flood":
		return fmt.Errorf("global.arpMode %q is not proxy or flood", g.ArpMode)
	case g.FwdMode != "routing":
		return fmt.Errorf("global.fwdMode %q: VXLAN needs routing", g.FwdMode)
	case g.NetworkInfraType != "default":
		return fmt.Errorf("global.networkInfraType %q is not default", g.NetworkInfraType)
	}
	private, err := parseIPv4Prefix(g.PvtSubnet)
	if err != nil || private.Bits() != 16 {
		return fmt.Errorf("global.pvtSubnet %q is not an IPv4 /16", g.PvtSubnet)
	}
	if _, _, err := parseRange(g.Vlans, 4094); err != nil {
		return fmt.Errorf("global.vlans: %w", err)
	}
	lo, hi, err := parseRange(g.Vxlans, maxVNI)
	if err != nil {
		return fmt.Errorf("global.vxlans: %w", err)
	}
	if hi-lo > maxVXLANWidth {
		return fmt.Errorf("global.vxlans %s is wider than Contiv's %d", g.Vxlans, maxVXLANWidth)
	}

	if !contivName.MatchString(n.TenantName) || len(n.TenantName) > 64 {
		return fmt.Errorf("network.tenantName %q is not a Contiv name", n.TenantName)
	}
	if !contivName.MatchString(n.NetworkName) || len(n.NetworkName) > 64 {
		return fmt.Errorf("network.networkName %q is not a Contiv name", n.NetworkName)
	}
	if n.Key != n.TenantName+":"+n.NetworkName {
		return fmt.Errorf("network.key %q must be tenantName:networkName", n.Key)
	}
	if n.NwType != "data" || n.Encap != "vxlan" {
		return fmt.Errorf("network: nwType %q, encap %q; want data and vxlan", n.NwType, n.Encap)
	}
	if n.PktTag < lo || n.PktTag > hi {
		return fmt.Errorf("network.pktTag %d (the VNI) is outside global.vxlans %s", n.PktTag, g.Vxlans)
	}
	subnet, err := parseIPv4Prefix(n.Subnet)
	if err != nil || subnet.Bits() < 1 || subnet.Bits() > 30 {
		return fmt.Errorf("network.subnet %q is not an IPv4 network of /1 to /30", n.Subnet)
	}
	if subnet.Overlaps(private) {
		return fmt.Errorf("network.subnet %s overlaps global.pvtSubnet %s", subnet, private)
	}
	gw, err := netip.ParseAddr(n.Gateway)
	if err != nil || !subnet.Contains(gw) || gw == subnet.Addr() {
		return fmt.Errorf("network.gateway %q is not a host address of %s", n.Gateway, subnet)
	}
	return nil
}

func parseIPv4Prefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q is not an IPv4 network in CIDR form", s)
	}
	return p, nil
}

func parseRange(s string, top int) (lo, hi int, err error) {
	m := contivRange.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("%q is not a range such as 1-10000", s)
	}
	lo, _ = strconv.Atoi(m[1])
	hi, _ = strconv.Atoi(m[2])
	if lo < 1 || lo > hi || hi > top {
		return 0, 0, fmt.Errorf("%q is not a range within 1-%d", s, top)
	}
	return lo, hi, nil
}

// netmasterAPI is netmaster's REST API (contivmodel routes). Any
// netmaster answers; a follower forwards writes to the leader.
type netmasterAPI struct {
	base   string
	client *http.Client
}

func newNetmasterAPI(base string) *netmasterAPI {
	// Loopback only, never through a proxy from the environment.
	return &netmasterAPI{base: base, client: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: nil}}}
}

// applyFunc pushes spec into netmaster: each object is read first and
// written only when it differs, so a pass over a converged netmaster
// writes nothing.
func (a *netmasterAPI) applyFunc(spec NetworkSpec) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		var actions []string
		changed, err := ensureObject(ctx, a, "/api/v1/globals/"+spec.Global.Key+"/", spec.Global)
		if err != nil {
			return actions, fmt.Errorf("contiv global settings: %w", err)
		}
		if changed {
			actions = append(actions, "applied contiv global settings (vxlans "+spec.Global.Vxlans+")")
		}
		changed, err = ensureObject(ctx, a, "/api/v1/networks/"+spec.Network.Key+"/", spec.Network)
		if err != nil {
			return actions, fmt.Errorf("contiv network %s: %w", spec.Network.Key, err)
		}
		if changed {
			actions = append(actions, fmt.Sprintf("applied contiv network %s (%s, VNI %d)", spec.Network.Key, spec.Network.Subnet, spec.Network.PktTag))
		}
		return actions, nil
	}
}

// ensureObject makes the object at path equal want, in the fields want
// has.
func ensureObject[T comparable](ctx context.Context, a *netmasterAPI, path string, want T) (changed bool, err error) {
	status, body, err := a.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	switch {
	case status == http.StatusOK:
		var got T
		if err := json.Unmarshal(body, &got); err != nil {
			return false, fmt.Errorf("GET %s: %w", path, err)
		}
		if got == want {
			return false, nil
		}
	// netmaster answers a missing object with 500 "... not found".
	case status == http.StatusNotFound || strings.Contains(strings.ToLower(string(body)), "not found"):
	default:
		return false, fmt.Errorf("GET %s: %d %s", path, status, short(body))
	}
	payload, err := json.Marshal(want)
	if err != nil {
		return false, err
	}
	status, body, err = a.do(ctx, http.MethodPost, path, payload)
	if err != nil {
		return false, err
	}
	if status != http.StatusOK {
		return false, fmt.Errorf("POST %s: %d %s", path, status, short(body))
	}
	return true, nil
}

func (a *netmasterAPI) do(ctx context.Context, method, path string, payload []byte) (int, []byte, error) {
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return 0, nil, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("netmaster API: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("netmaster API: %s %s: %w", method, path, err)
	}
	return resp.StatusCode, data, nil
}

func short(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
