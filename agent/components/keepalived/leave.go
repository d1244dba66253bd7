package keepalived

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/harmonykaas/harmony/agent/reconcile"
	v1 "github.com/harmonykaas/harmony/api/v1"
)

var _ reconcile.Leaver = (*Component)(nil)

// Leave stops keepalived so that a leaving master gives the VIP up at once:
// a MASTER that stops sends a priority-0 advert and a backup takes the VIP
// over without waiting out the master-down timer. A VIP still on the
// interface afterwards (keepalived killed, not stopped) is removed, so that
// this node no longer answers for it.
func (c *Component) Leave(ctx context.Context, host *reconcile.Host, role *v1.Role) reconcile.Status {
	st := reconcile.Status{Component: c.Name(), Phase: reconcile.PhaseLeft, Healthy: true}
	c.remember(netip.Addr{}, "")
	actions, err := host.StopUnit(ctx, unitName)
	if err != nil {
		return failed(st, "%v", err)
	}
	st.Actions = actions
	st.Message = "keepalived stopped; the VIP is the remaining masters'"
	if role.Role != v1.RoleMaster && role.Role != v1.RoleAppliance {
		st.Message = "not a control-plane node: no VIP to give up"
		return st
	}
	vip, err := netip.ParseAddr(role.Cluster.VIP)
	iface := host.Facts.Interface
	if err != nil || iface == "" || !holds(iface, vip) {
		return st
	}
	if err := dropAddr(iface, vip); err != nil {
		return failed(st, "keepalived stopped but %s is still on %s: %v", vip, iface, err)
	}
	st.Actions = append(st.Actions, fmt.Sprintf("removed VIP %s from %s", vip, iface))
	return st
}

// dropAddr removes addr (as keepalived adds it: a host prefix) from iface.
func dropAddr(iface string, addr netip.Addr) error {
	link, err := netlink.LinkByName(iface)
	if err != nil {
		return err
	}
	bits := addr.BitLen()
	return netlink.AddrDel(link, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(bits, bits)}})
}
