package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
)

// externalRouteBench is make bench-externalroute's cluster, as the planner
// takes it: namespaces each selected by two policies of hops static hops
// (half per family, BFD on all), podsEach dual-stack pods each on this
// node; every hop resolved and its session up unless down says.
type externalRouteBench struct {
	routes     []*esv1.AdminPolicyBasedExternalRoute
	namespaces []*corev1.Namespace
	pods       []*corev1.Pod
	hops       []netip.Addr
}

func newExternalRouteBench(namespaces, podsEach, hops int) externalRouteBench {
	var w externalRouteBench
	for k := range 2 * hops {
		if k%2 == 0 {
			w.hops = append(w.hops, netip.AddrFrom4([4]byte{192, 0, 2, byte(k/2 + 1)}))
		} else {
			w.hops = append(w.hops, netip.MustParseAddr(fmt.Sprintf("2001:db8:e::%x", k/2+1)))
		}
	}
	for i := range namespaces {
		ns := fmt.Sprintf("er-%04d", i)
		w.namespaces = append(w.namespaces, labelledNamespace(ns, map[string]string{"route": ns}))
		for half := range 2 {
			var static []esv1.StaticHop
			for _, h := range w.hops[half*hops : (half+1)*hops] {
				static = append(static, esv1.StaticHop{IP: h.String(), BFDEnabled: true})
			}
			w.routes = append(w.routes, externalRoute(fmt.Sprintf("%s-%c", ns, 'a'+half), map[string]string{"route": ns}, static))
		}
		for j := range podsEach {
			k := i*podsEach + j + 1
			p := pod(ns, "n1", nil, fmt.Sprintf("10.%d.%d.%d", 128+k>>16, k>>8&0xff, k&0xff), fmt.Sprintf("fd00:10:128::%x", k))
			p.Name = fmt.Sprintf("p%02d", j)
			w.pods = append(w.pods, p)
		}
	}
	return w
}

// view has every hop resolved and its session up, but those in down.
func (w externalRouteBench) view(down map[netip.Addr]bool) ExternalRouteNode {
	return ExternalRouteNode{
		MAC: func(a netip.Addr) (net.HardwareAddr, bool) {
			return net.HardwareAddr{2, 0xe0, 0, 0, 0, a.As16()[15]}, true
		},
		BFDUp: func(a netip.Addr) bool { return !down[a] },
	}
}

// load feeds p the cluster as an agent's first sync does.
func (w externalRouteBench) load(p *Planner) []string {
	changed := p.SetNamespaces(w.namespaces)
	changed = append(changed, p.SetLocalPods(w.pods)...)
	changed = append(changed, p.SetExternalRouteView(w.view(nil), w.hops)...)
	for _, r := range w.routes {
		changed = append(changed, p.UpdateObject(ObjectKey(APIExternalRoute, "", r.Name), r)...)
	}
	return changed
}

var externalRouteConfig = NodeConfig{Name: "n1", ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/12"), netip.MustParsePrefix("fd00:10:128::/48")},
	ServiceCIDRs: n1Config.ServiceCIDRs}

// BenchmarkExternalRouteFirstSync is the pure part of an agent's first
// sync at make bench-externalroute's scale: 1,000 namespaces x 2 policies
// x 4 hops x 10 pods, the planner fed every object, and the Ledger's diff
// against an empty bridge.
func BenchmarkExternalRouteFirstSync(b *testing.B) {
	w := newExternalRouteBench(1000, 10, 4)
	var sent int
	out := countingOutput(&sent)
	b.ReportAllocs()
	for b.Loop() {
		p := NewPlanner(externalRouteConfig, tables)
		changed := w.load(p)
		l := NewLedger()
		l.Changed(p, changed)
		sent = 0
		if _, err := l.Diff(p, Ports{Uplink: 1}, NewInstalled(nil), out); err != nil {
			b.Fatal(err)
		}
		if sent < 100000 {
			b.Fatalf("%d flows sent, want more than the external routes' 118,000", sent)
		}
	}
}

// BenchmarkExternalRouteHopDown is the pure part of the sync after a hop's
// BFD session went down at that scale: the view changed, and the diff of
// what changed (every namespace's IPv4 group).
func BenchmarkExternalRouteHopDown(b *testing.B) {
	w := newExternalRouteBench(1000, 10, 4)
	p := NewPlanner(externalRouteConfig, tables)
	l := NewLedger()
	l.Changed(p, w.load(p))
	var sent int
	first, err := l.Diff(p, Ports{Uplink: 1}, NewInstalled(nil), countingOutput(&sent))
	if err != nil {
		b.Fatal(err)
	}
	l.Commit(first)
	b.ReportAllocs()
	down := false
	for b.Loop() {
		down = !down
		changed := p.SetExternalRouteView(w.view(map[netip.Addr]bool{w.hops[0]: down}), w.hops[:1])
		if len(changed) != 1000 {
			b.Fatalf("%d parts changed, want the 1,000 namespaces'", len(changed))
		}
		l.Changed(p, changed)
		sent = 0
		d, err := l.Diff(p, Ports{Uplink: 1}, nil, countingOutput(&sent))
		if err != nil {
			b.Fatal(err)
		}
		l.Commit(d)
	}
}
