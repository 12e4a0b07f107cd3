package iprule

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/egressflow/egressflow/controller/dataplane"
)

// The routes of egressflow's own tables (dataplane.RouterTableBase): the
// EgressRouters' gateways, which their rules send the redirected
// connections through. Every route in those tables is egressflow's.

// InstalledRoutes lists the routes of egressflow's tables, IPv4 and IPv6.
func (m *Manager) InstalledRoutes() ([]dataplane.Route, error) {
	var out []dataplane.Route
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		// Table 0 with the table filter lists every table's routes.
		list, err := m.handle.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range list {
			if dataplane.IsRouterTable(r.Table) {
				out = append(out, fromNetlinkRoute(r, family))
			}
		}
	}
	return out, nil
}

// SyncRoutes makes the routes of egressflow's tables equal desired,
// through the Manager's route device, and returns how many it added
// and removed. Routes on the link go in before those through a gateway,
// and come out after them: the kernel resolves a gateway when its route is
// added. It goes on after a failed change and reports all failures
// together.
func (m *Manager) SyncRoutes(desired []dataplane.Route) (added, removed int, err error) {
	installed, err := m.InstalledRoutes()
	if err != nil {
		return 0, 0, err
	}
	add, remove := Diff(installed, desired, dataplane.Route.Compare)
	if len(add)+len(remove) == 0 {
		return 0, 0, nil
	}
	device := m.routeDevice
	link, err := m.handle.LinkByName(device)
	if err != nil {
		return 0, 0, fmt.Errorf("the routes' device %q: %w", device, err)
	}
	onLinkLast := func(a, b dataplane.Route) int { return boolOrder(!a.Gateway.IsValid(), !b.Gateway.IsValid()) }
	slices.SortStableFunc(remove, onLinkLast)
	slices.SortStableFunc(add, func(a, b dataplane.Route) int { return -onLinkLast(a, b) })
	var errs []error
	for _, r := range remove {
		if err := m.handle.RouteDel(toNetlinkRoute(r, link.Attrs().Index)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
			continue
		}
		removed++
	}
	for _, r := range add {
		if err := m.handle.RouteAdd(toNetlinkRoute(r, link.Attrs().Index)); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("add route %s dev %s: %w", r, device, err))
			continue
		}
		added++
	}
	return added, removed, errors.Join(errs...)
}

// boolOrder orders false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// fromNetlinkRoute reads a route of family; a default route may come
// without a destination.
func fromNetlinkRoute(r netlink.Route, family int) dataplane.Route {
	out := dataplane.Route{Table: r.Table, Destination: netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
	if family == netlink.FAMILY_V6 {
		out.Destination = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	if r.Dst != nil {
		ones, _ := r.Dst.Mask.Size()
		if addr, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			out.Destination = netip.PrefixFrom(addr.Unmap(), ones)
		}
	}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok {
		if family == netlink.FAMILY_V4 {
			gw = gw.Unmap()
		}
		out.Gateway = gw
	}
	return out
}

func toNetlinkRoute(r dataplane.Route, linkIndex int) *netlink.Route {
	p := r.Destination
	route := &netlink.Route{LinkIndex: linkIndex, Table: r.Table,
		Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if r.Gateway.IsValid() {
		route.Gw = r.Gateway.AsSlice()
	} else if p.Addr().Is4() {
		route.Scope = netlink.SCOPE_LINK
	}
	return route
}
