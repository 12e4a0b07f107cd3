package conntrack_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressflow/egressflow/conntrack"
	"github.com/egressflow/egressflow/openflow"
	"github.com/egressflow/egressflow/openflow/ofconn"
	"github.com/egressflow/egressflow/test/topology"
)

func TestStale(t *testing.T) {
	a := netip.MustParseAddr
	before := conntrack.Translations{
		a("10.0.0.1"): a("192.0.2.1"),
		a("10.0.0.2"): a("192.0.2.1"),
		a("10.0.0.3"): a("192.0.2.1"),
		a("fd00::1"):  a("2001:db8::1"),
		a("10.0.0.9"): a("192.0.2.2"),
	}
	after := conntrack.Translations{
		a("10.0.0.1"): a("192.0.2.1"), // unchanged
		a("10.0.0.3"): a("192.0.2.5"), // new LB IP
		a("10.0.0.9"): a("192.0.2.2"), // unchanged
		a("10.0.0.4"): a("192.0.2.1"), // new: nothing to flush
	}
	want := []netip.Addr{a("10.0.0.2"), a("10.0.0.3"), a("fd00::1")}
	if got := conntrack.Stale(before, after); !slices.Equal(got, want) {
		t.Errorf("Stale = %v, want %v", got, want)
	}
	if got := conntrack.Stale(after, after); len(got) != 0 {
		t.Errorf("nothing changed, yet Stale = %v", got)
	}
	if got := conntrack.Stale(nil, after); len(got) != 0 {
		t.Errorf("from nothing, Stale = %v", got)
	}
}

// failingFlusher refuses its n-th flush.
type failingFlusher struct {
	calls, failAt int
	filters       []*openflow.CTFlush
}

func (f *failingFlusher) FlushConntrack(_ context.Context, filter *openflow.CTFlush) error {
	f.calls++
	if f.calls == f.failAt {
		return fmt.Errorf("refused")
	}
	f.filters = append(f.filters, filter)
	return nil
}

func TestFlushSourcesStopsAtFirstError(t *testing.T) {
	srcs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
	// The switch refuses the first filter of the second source.
	first := conntrack.SourceFilters(conntrack.SNATZone, srcs[0])
	f := &failingFlusher{failAt: len(first) + 1}
	n, err := conntrack.FlushSources(context.Background(), f, conntrack.SNATZone, srcs)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "10.0.0.2") {
		t.Fatalf("FlushSources = %d, %v; want 1 and an error naming 10.0.0.2", n, err)
	}
	if !reflect.DeepEqual(f.filters, first) {
		t.Fatalf("filters sent: %+v", f.filters)
	}
}

// TestFlushSourcesOnRealSwitch commits connections of two pods, IPv4
// (ICMP, UDP) and IPv6 (TCP, UDP), into the SNAT zone through real packets,
// flushes one pod's addresses, and checks that only its entries went: the
// other pod's, and the same pod's in another zone, stay; and that the
// switch survives (an all-protocol IPv6 flush would have killed it).
func TestFlushSourcesOnRealSwitch(t *testing.T) {
	topo := topology.New(t, 1)
	n := topo.Nodes[0]
	server := topo.External.Serve(t)
	gone, kept := n.AddPod(t, "gone"), n.AddPod(t, "kept")
	const otherZone = 7
	commit := fmt.Sprintf("actions=ct(commit,zone=%d),ct(commit,zone=%d),normal", conntrack.SNATZone, otherZone)
	n.Ofctl(t, "add-flow", n.Bridge, fmt.Sprintf("priority=10,ip,nw_src=%s,%s", topology.ClusterPodPrefix, commit))
	n.Ofctl(t, "add-flow", n.Bridge, fmt.Sprintf("priority=10,ipv6,ipv6_src=%s,%s", topology.ClusterPodPrefix6, commit))
	for _, p := range []*topology.Pod{gone, kept} {
		if err := p.Ping(topo.External.IP, 1); err != nil {
			t.Fatal(err)
		}
		for _, dial := range []struct {
			network string
			server  netip.AddrPort
		}{{"udp", server.Addr}, {"udp", server.Addr6}, {"tcp", server.Addr6}} {
			if _, err := p.Dial(dial.network, dial.server); err != nil {
				t.Fatal(err)
			}
		}
	}
	// entries counts zone's connections from src, by protocol.
	entries := func(zone int, src netip.Addr) map[string]int {
		dump := n.Appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", zone))
		count := map[string]int{}
		for _, line := range strings.Split(dump, "\n") {
			if proto, rest, ok := strings.Cut(line, ",orig=(src="+src.String()+","); ok && rest != "" {
				count[proto]++
			}
		}
		return count
	}
	wantBefore := map[netip.Addr]map[string]int{}
	for _, p := range []*topology.Pod{gone, kept} {
		wantBefore[p.IP] = map[string]int{"icmp": 1, "udp": 1}
		wantBefore[p.IP6] = map[string]int{"udp": 1, "tcp": 1}
	}
	for _, zone := range []int{int(conntrack.SNATZone), otherZone} {
		for src, want := range wantBefore {
			if got := entries(zone, src); !maps.Equal(got, want) {
				t.Fatalf("zone %d entries from %s before the flush: %v, want %v", zone, src, got, want)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := ofconn.Dial(ctx, "unix:"+n.MgmtSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if flushed, err := conntrack.FlushSources(ctx, client, conntrack.SNATZone, gone.Addrs()); err != nil || flushed != 2 {
		t.Fatalf("FlushSources = %d, %v", flushed, err)
	}
	// Each flush is followed by a barrier: no waiting needed.
	for _, src := range gone.Addrs() {
		if got := entries(int(conntrack.SNATZone), src); len(got) != 0 {
			t.Errorf("entries from %s remain in the SNAT zone after the flush: %v", src, got)
		}
		if got := entries(otherZone, src); !maps.Equal(got, wantBefore[src]) {
			t.Errorf("entries from %s in another zone: %v, want them untouched (%v)", src, got, wantBefore[src])
		}
	}
	for _, src := range kept.Addrs() {
		if got := entries(int(conntrack.SNATZone), src); !maps.Equal(got, wantBefore[src]) {
			t.Errorf("the other pod's entries from %s: %v, want them untouched (%v)", src, got, wantBefore[src])
		}
	}
}

// TestRedirectFilters: a reserved address's flush selects, in the
// router's destination-NAT zone, the connections to it and, in its
// source-NAT zone, those whose replies go to it, for each protocol its
// family needs, and never an IPv6 flush of all protocols (which kills
// Open vSwitch 3.1.0's userspace datapath).
func TestRedirectFilters(t *testing.T) {
	for _, addr := range []netip.Addr{netip.MustParseAddr("172.18.0.60"), netip.MustParseAddr("fd00:172:18::60")} {
		seen := map[uint16][]uint8{}
		for _, f := range conntrack.RedirectFilters(addr) {
			if !f.HasZone {
				t.Fatalf("%s: a filter without a zone (zone 0 to the switch): %+v", addr, f)
			}
			switch f.Zone {
			case conntrack.RouterZone:
				if f.Orig != (openflow.CTTuple{Dst: addr}) || f.Reply != (openflow.CTTuple{}) {
					t.Errorf("%s: RouterZone filter %+v, want the original destination alone", addr, f)
				}
			case conntrack.RouterSNATZone:
				if f.Reply != (openflow.CTTuple{Dst: addr}) || f.Orig != (openflow.CTTuple{}) {
					t.Errorf("%s: RouterSNATZone filter %+v, want the reply's destination alone", addr, f)
				}
			default:
				t.Errorf("%s: a filter of zone %d", addr, f.Zone)
			}
			seen[f.Zone] = append(seen[f.Zone], f.Proto)
		}
		for _, zone := range []uint16{conntrack.RouterZone, conntrack.RouterSNATZone} {
			protos := seen[zone]
			for _, p := range []uint8{6, 17, 132} {
				if !slices.Contains(protos, p) {
					t.Errorf("%s: zone %d has no filter for protocol %d: %v", addr, zone, p, protos)
				}
			}
			if addr.Is6() && slices.Contains(protos, 0) {
				t.Errorf("%s: zone %d flushes IPv6 across all protocols", addr, zone)
			}
		}
	}
}
