package agent

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/egressflow/egressflow/controller/heartbeat"
)

// ipvsServiceInterface is the dummy interface to which kube-proxy's IPVS
// mode binds every ClusterIP, external IP and load-balancer IP of the
// cluster, so that the node accepts them: service addresses, not the
// node's. Its addresses are never published as host addresses (an LB IP
// among them would exempt traffic to it from every node's egress
// decision). Only this name is known to hold them.
const ipvsServiceInterface = "kube-ipvs0"

// HostAddressReader reads the node's host addresses for its heartbeat
// (heartbeat.Facts.HostAddresses), once per renewal: one netlink dump of
// every interface's addresses, cheaper than keeping a subscription's cache
// current, and published within a renewal interval of a change. Safe for
// concurrent use.
type HostAddressReader struct {
	// Handle is the node's network namespace.
	Handle *netlink.Handle
	// Excluded are the addresses that are no host's
	// (Agent.HostAddressExclusions), asked at every read.
	Excluded func() []netip.Prefix

	mu sync.Mutex
	// last is the list last read, published again while a read fails,
	// so that a netlink hiccup does not withdraw every host address (and
	// send traffic to them out SNATed) for a renewal.
	last []netip.Addr
}

// Read returns the node's host addresses: heartbeat.HostAddresses of the
// addresses on every interface but ipvsServiceInterface, without the
// excluded ones.
func (r *HostAddressReader) Read() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	addrs, err := r.read()
	if err != nil {
		klog.ErrorS(err, "Could not read the node's addresses; publishing those read last", "addresses", len(r.last))
		return r.last
	}
	r.last = heartbeat.HostAddresses(addrs, r.Excluded())
	return r.last
}

func (r *HostAddressReader) read() ([]netip.Prefix, error) {
	skip := 0 // interface indexes start at 1
	if link, err := r.Handle.LinkByName(ipvsServiceInterface); err == nil {
		skip = link.Attrs().Index
	}
	list, err := r.Handle.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	return AddrPrefixes(slices.DeleteFunc(list, func(a netlink.Addr) bool { return a.LinkIndex == skip })), nil
}

// AddrPrefixes are netlink's addresses as prefixes (address and length),
// unmapped; entries without an address are left out.
func AddrPrefixes(addrs []netlink.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out
}

// HostAddressExclusions are the addresses that may sit on the node's
// interfaces without being the node's own: the cluster's pod CIDRs (a pod
// gateway on cni0), its service CIDRs, and every egress IP of every
// EgressIP (egressflow answers for them with flows, but an operator may
// have put one on an interface). The EgressIPs are read from the agent's
// cache: none until it has listed them.
func (a *Agent) HostAddressExclusions() []netip.Prefix {
	out := append(append([]netip.Prefix(nil), a.cfg.Node.ClusterPodCIDRs...), a.cfg.Node.ServiceCIDRs...)
	eips, err := a.egressIPs.List(labels.Everything())
	if err != nil {
		return out
	}
	for _, eip := range eips {
		for _, s := range eip.Spec.EgressIPs {
			if addr, err := netip.ParseAddr(s); err == nil {
				out = append(out, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			}
		}
	}
	return out
}
