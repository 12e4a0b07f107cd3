// Package conntrack owns egressflow's use of connection tracking on the
// bridge: the zones its connections are committed to, which of the SNAT
// zone's connections carry a translation the flows no longer make (an
// endpoint removed, a service's LB IP or host changed), and flushing
// exactly those through Open vSwitch (NXT_CT_FLUSH by zone and original
// source), so no stale translation survives and nobody else's connections
// are touched; and, by zone and reserved address, the connections an
// EgressRouter redirected on a node that no longer serves it.
//
// Working out which translations a dataplane state makes is the dataplane
// package's business (dataplane.State.Translations); this package compares
// two such sets and flushes the difference.
package conntrack

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/egressflow/egressflow/openflow"
)

// SNATZone is the conntrack zone of every connection egressflow SNATs. One
// zone is enough: the SNAT and un-SNAT flows all use it, and flushes select
// entries by original source. The number stays clear of the small zones
// other OVS users favour (ovn-kubernetes uses 64000, the kernel default is
// 0), so a flush here never reaches their connections.
const SNATZone uint16 = 61189

// Translations maps the original source address of connections (an
// endpoint's pod IP) to the address conntrack rewrites it to (an LB IP).
type Translations map[netip.Addr]netip.Addr

// Stale returns the sources whose translation in before is gone or differs
// in after: their conntrack entries rewrite to an address no flow uses any
// more, and would keep doing so for the connection's lifetime. Sorted.
func Stale(before, after Translations) []netip.Addr {
	var stale []netip.Addr
	for src, to := range before {
		if now, ok := after[src]; !ok || now != to {
			stale = append(stale, src)
		}
	}
	slices.SortFunc(stale, netip.Addr.Compare)
	return stale
}

// Flusher deletes conntrack entries; *ofconn.Client is one.
type Flusher interface {
	FlushConntrack(ctx context.Context, filter *openflow.CTFlush) error
}

// ipv6FlushProtocols are the transport protocols an IPv6 source is flushed
// for, one message each. A flush of an IPv6 source across all protocols
// (protocol 0 in NXT_CT_FLUSH, or `ovs-appctl dpctl/flush-conntrack
// ct_ipv6_src=...`) kills ovs-vswitchd 3.1.0 (Debian 12's) with the
// userspace datapath; with a protocol it works. ICMPv6 is in the list for
// later versions: 3.1.0 matches no ICMPv6 entry by source alone, so there
// stale ICMPv6 entries expire on their own (ICMP's conntrack timeouts are
// short).
var ipv6FlushProtocols = []uint8{
	syscall.IPPROTO_TCP, syscall.IPPROTO_UDP, syscall.IPPROTO_SCTP, syscall.IPPROTO_ICMPV6,
}

// ipv4FlushProtocols are the same for an IPv4 source: first all protocols
// (0), the only way 3.1.0 matches an ICMP entry by source, then each
// transport protocol again, because 3.1.0 can leave one of a source's
// entries behind when it flushes several protocols' at once
// (TestAgentEgressIP saw a UDP entry survive beside a flushed TCP and ICMP
// one).
var ipv4FlushProtocols = []uint8{
	0, syscall.IPPROTO_TCP, syscall.IPPROTO_UDP, syscall.IPPROTO_SCTP,
}

// SourceFilters select zone's connections whose original source is src,
// whatever their other fields: one filter per transport protocol (see
// ipv4FlushProtocols, ipv6FlushProtocols).
func SourceFilters(zone uint16, src netip.Addr) []*openflow.CTFlush {
	return perProtocol(src, openflow.CTFlush{Zone: zone, HasZone: true, Orig: openflow.CTTuple{Src: src}})
}

// RedirectFilters select the connections an EgressRouter's redirect made
// through its reserved address addr: in RouterZone those to addr (their
// original destination, before the destination NAT), in RouterSNATZone
// those translated to it (their reply's destination). One filter per
// transport protocol and zone.
func RedirectFilters(addr netip.Addr) []*openflow.CTFlush {
	return append(perProtocol(addr, openflow.CTFlush{Zone: RouterZone, HasZone: true, Orig: openflow.CTTuple{Dst: addr}}),
		perProtocol(addr, openflow.CTFlush{Zone: RouterSNATZone, HasZone: true, Reply: openflow.CTTuple{Dst: addr}})...)
}

// perProtocol is filter once for each transport protocol that a flush of
// addr's family needs (ipv4FlushProtocols, ipv6FlushProtocols).
func perProtocol(addr netip.Addr, filter openflow.CTFlush) []*openflow.CTFlush {
	protocols := ipv6FlushProtocols
	if addr.Is4() {
		protocols = ipv4FlushProtocols
	}
	filters := make([]*openflow.CTFlush, len(protocols))
	for i, proto := range protocols {
		f := filter
		f.Proto = proto
		filters[i] = &f
	}
	return filters
}

// FlushSources flushes zone's connections from each of srcs, in order, and
// returns how many sources it flushed before the first error (a retry
// flushes them all again, which is harmless).
func FlushSources(ctx context.Context, f Flusher, zone uint16, srcs []netip.Addr) (int, error) {
	return flushEach(ctx, f, srcs, func(src netip.Addr) []*openflow.CTFlush { return SourceFilters(zone, src) },
		fmt.Sprintf("zone %d connections from", zone))
}

// FlushRedirects flushes the connections redirected through each of
// addrs (RedirectFilters), in order, and returns how many addresses it
// flushed before the first error. Each address's filters are sent twice:
// after one pass, Open vSwitch 3.1.0's userspace datapath still held one
// UDP connection of a reserved IPv6 address in each zone in 4 of 6 runs
// of TestAgentEgressRouter (each filter matched several), as it leaves
// one of an IPv4 source's entries behind (ipv4FlushProtocols); after a
// second pass, none was left in 6 runs.
func FlushRedirects(ctx context.Context, f Flusher, addrs []netip.Addr) (int, error) {
	twice := func(addr netip.Addr) []*openflow.CTFlush {
		filters := RedirectFilters(addr)
		return append(filters, filters...)
	}
	return flushEach(ctx, f, addrs, twice, "connections redirected through")
}

// flushEach sends the filters of each address in turn; what names them in
// an error.
func flushEach(ctx context.Context, f Flusher, addrs []netip.Addr, filters func(netip.Addr) []*openflow.CTFlush, what string) (int, error) {
	for i, addr := range addrs {
		for _, filter := range filters(addr) {
			if err := f.FlushConntrack(ctx, filter); err != nil {
				return i, fmt.Errorf("flush %s %s: %w", what, addr, err)
			}
		}
	}
	return len(addrs), nil
}
