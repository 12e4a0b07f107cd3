// Package conntrack owns egressflow's use of connection tracking on the
// bridge: the zone its SNAT connections are committed to, which of those
// connections carry a translation the flows no longer make (an endpoint
// removed, a service's LB IP or host changed), and flushing exactly those
// through Open vSwitch (NXT_CT_FLUSH by zone and original source), so no
// stale translation survives and nobody else's connections are touched.
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

// Flusher deletes conntrack entries; *openflow.Client is one.
type Flusher interface {
	FlushConntrack(ctx context.Context, filter *openflow.CTFlush) error
}

// SourceFilter selects zone's connections whose original source is src,
// whatever their other fields.
func SourceFilter(zone uint16, src netip.Addr) *openflow.CTFlush {
	return &openflow.CTFlush{Zone: zone, HasZone: true, Orig: openflow.CTTuple{Src: src}}
}

// FlushSources flushes zone's connections from each of srcs, in order, and
// returns how many sources it flushed before the first error (a retry
// flushes them all again, which is harmless).
func FlushSources(ctx context.Context, f Flusher, zone uint16, srcs []netip.Addr) (int, error) {
	for i, src := range srcs {
		if err := f.FlushConntrack(ctx, SourceFilter(zone, src)); err != nil {
			return i, fmt.Errorf("flush zone %d connections from %s: %w", zone, src, err)
		}
	}
	return len(srcs), nil
}
