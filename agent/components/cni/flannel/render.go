package flannel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/harmonykaas/harmony/agent/components/cni/plugin"
)

// NetConf is flannel's network configuration (its net-conf.json), reduced
// to what Harmony sets.
type NetConf struct {
	Network string  `json:"Network"`
	Backend Backend `json:"Backend"`
}

// Backend is flannel's VXLAN backend.
type Backend struct {
	Type string `json:"Type"`
	VNI  int    `json:"VNI"`
	Port int    `json:"Port"`
}

func renderNetConf(in params) ([]byte, error) {
	return marshal(NetConf{Network: in.podCIDR.String(), Backend: Backend{Type: "vxlan", VNI: in.vni, Port: in.port}})
}

// validateNetConf checks a candidate net-conf.json as flanneld will read it.
func validateNetConf(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var c NetConf
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("net-conf.json: %w", err)
	}
	if p, err := netip.ParsePrefix(c.Network); err != nil || !p.Addr().Is4() || p.Masked() != p {
		return fmt.Errorf("net-conf.json: Network %q is not an IPv4 network in CIDR form", c.Network)
	}
	switch {
	case c.Backend.Type != "vxlan":
		return fmt.Errorf("net-conf.json: Backend.Type is %q, want vxlan", c.Backend.Type)
	case c.Backend.VNI < 1 || c.Backend.VNI > 1<<24-1:
		return fmt.Errorf("net-conf.json: Backend.VNI %d is not between 1 and 16777215", c.Backend.VNI)
	case c.Backend.Port < 1 || c.Backend.Port > 65535:
		return fmt.Errorf("net-conf.json: Backend.Port %d is not a UDP port", c.Backend.Port)
	}
	return nil
}

// lease is what flanneld writes to its subnet file.
type lease struct {
	// subnet is the node's pod subnet, masked (FLANNEL_SUBNET holds the
	// gateway's address with the prefix length).
	subnet netip.Prefix
	mtu    int
}

// readLease parses flanneld's subnet file (KEY=VALUE lines). Only the
// keys the network configuration needs are read, and checked.
func readLease(path string) (lease, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return lease{}, errors.New("not written yet")
		}
		return lease{}, err
	}
	values := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			values[k] = v
		}
	}
	var l lease
	subnet, err := netip.ParsePrefix(values["FLANNEL_SUBNET"])
	if err != nil || !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return lease{}, fmt.Errorf("FLANNEL_SUBNET %q is not an IPv4 subnet with room for pods", values["FLANNEL_SUBNET"])
	}
	l.subnet = subnet.Masked()
	l.mtu, err = strconv.Atoi(values["FLANNEL_MTU"])
	// 1280 is the least a link may carry and still have IPv6; VXLAN
	// below it means a broken uplink.
	if err != nil || l.mtu < 1280 || l.mtu > 65535 {
		return lease{}, fmt.Errorf("FLANNEL_MTU %q is not an MTU between 1280 and 65535", values["FLANNEL_MTU"])
	}
	return l, nil
}

// CNI names and the spec version Debian's reference plugins (1.1) and
// the image's containerd (1.6) both speak.
const (
	networkName = "harmony-flannel"
	bridgeName  = "cni0"
	cniVersion  = "1.0.0"
)

// ConfListRule is what the flannel network configuration must be.
var ConfListRule = plugin.ConfListRule{CNIVersion: cniVersion, Name: networkName, Types: []string{"bridge", "portmap"}}

// renderConfList is the bridge that flannel's own CNI plugin would
// delegate to: the node's lease as host-local's range, the bridge as the
// pods' gateway, the VXLAN MTU, no masquerade (flanneld does it for
// traffic that leaves the pod network), and portmap for hostPorts.
func renderConfList(l lease, podCIDR netip.Prefix) ([]byte, error) {
	list := map[string]any{
		"cniVersion": cniVersion,
		"name":       networkName,
		"plugins": []map[string]any{
			{
				"type":             "bridge",
				"bridge":           bridgeName,
				"isGateway":        true,
				"isDefaultGateway": true,
				"hairpinMode":      true,
				"ipMasq":           false,
				"mtu":              l.mtu,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": l.subnet.String()}}},
					"routes": []map[string]string{{"dst": podCIDR.String()}},
				},
			},
			{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return marshal(list)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

var marshal = plugin.MarshalJSON
