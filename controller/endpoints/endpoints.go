// Package endpoints reads a Service's addresses: its endpoints' out of its
// EndpointSlices, and its load-balancer IPs out of its status, as both the
// cluster component (is the Service eligible, which nodes run an endpoint)
// and the node agent (which pod IPs to SNAT, steer or route, to which LB IP)
// need them; and a Node's addresses (NodeAddresses). Pure functions of the
// objects.
package endpoints

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Endpoint is one address of a Service endpoint and the node it runs on
// ("" when the slice does not say).
type Endpoint struct {
	IP   netip.Addr
	Node string
}

// Compare orders endpoints by IP, then node.
func (e Endpoint) Compare(o Endpoint) int {
	if c := e.IP.Compare(o.IP); c != 0 {
		return c
	}
	switch {
	case e.Node < o.Node:
		return -1
	case e.Node > o.Node:
		return 1
	}
	return 0
}

// OnClusterNetwork returns the addresses of every endpoint in the slices that
// lie in one of podCIDRs (every address when podCIDRs is empty): pod IPs on
// the cluster network, not host-networked endpoints. Readiness is ignored,
// like the reference: ready, not-ready and terminating endpoints all count.
// FQDN slices and unparseable addresses are skipped. The result is sorted
// and free of duplicates (an address listed in two slices counts once).
func OnClusterNetwork(endpointSlices []*discoveryv1.EndpointSlice, podCIDRs []netip.Prefix) []Endpoint {
	// Sized for every address up front: the node agent keeps the result of
	// each service, and growing by appends would leave it up to twice as
	// large.
	n := 0
	for _, s := range endpointSlices {
		if s != nil {
			for _, ep := range s.Endpoints {
				n += len(ep.Addresses)
			}
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]Endpoint, 0, n)
	for _, s := range endpointSlices {
		if s == nil || s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for _, ep := range s.Endpoints {
			node := ""
			if ep.NodeName != nil {
				node = *ep.NodeName
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				addr = addr.Unmap()
				if len(podCIDRs) == 0 || Contains(podCIDRs, addr) {
					out = append(out, Endpoint{IP: addr, Node: node})
				}
			}
		}
	}
	slices.SortFunc(out, Endpoint.Compare)
	return slices.CompactFunc(out, func(a, b Endpoint) bool { return a.IP == b.IP })
}

// Contains reports whether addr lies in one of prefixes.
func Contains(prefixes []netip.Prefix, addr netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// LoadBalancerIPs returns the first IPv4 and the first IPv6 address in the
// Service's status.loadBalancer.ingress, in list order; a family with none is
// the zero Addr. Hostname-only entries and unparseable IPs are skipped.
func LoadBalancerIPs(svc *corev1.Service) (v4, v6 netip.Addr) {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		addr, err := netip.ParseAddr(ing.IP)
		if err != nil {
			continue
		}
		addr = addr.Unmap()
		switch {
		case addr.Is4() && !v4.IsValid():
			v4 = addr
		case addr.Is6() && !v6.IsValid():
			v6 = addr
		}
	}
	return v4, v6
}

// NodeAddresses are a Node's addresses as the egress family reads them: its
// InternalIP and ExternalIP addresses (unmapped; those that do not parse
// are skipped), in the Node's order. The node agent exempts them and
// matches EgressFirewall's nodeSelector rules against them; the cluster
// component never lets an EgressIP hold one.
func NodeAddresses(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if addr, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, addr.Unmap())
		}
	}
	return out
}
