package trace_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/openflow"
)

// TestExternalRoutePrecedence: an AdminPolicyBasedExternalRoute selects
// namespace shop (every pod of the test cluster), with two IPv4 gateways
// on the uplink's segment, and shop has an EgressFirewall and an
// EgressQoS. On n1:
//   - a bystander's packet passes the firewall and QoS (its DSCP kept) and
//     is handed to the route's select group; one of a connection that has
//     a gateway recorded goes straight to that gateway's MAC;
//   - a packet the firewall denies is dropped before the group;
//   - web's endpoint leaves with its LB IP, api's is steered to its host,
//     db's is dropped, an EgressIP's pod is steered to its holder: the
//     source APIs come first;
//   - the pod the guard holds stays held;
//   - net's endpoint (Network mode) is routed through the gateways, and
//     its ip rule is withheld;
//   - IPv6, for which the policy lists no gateway, goes to a group
//     without buckets: dropped, never sent another way;
//   - a gateway's packet to a pod records the gateway and is then treated
//     as any packet to the pod (the firewall's inbound commit included).
func TestExternalRoutePrecedence(t *testing.T) {
	const gw1, gw2 = "172.18.0.50", "172.18.0.51"
	gwMACs := map[string]net.HardwareAddr{gw1: {2, 0, 0, 0, 0, 0x50}, gw2: {2, 0, 0, 0, 0, 0x51}}
	cluster := testCluster()
	cluster.Namespaces = []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"egress": "gateways"}}}}
	cluster.ExternalRoutes = []*esv1.AdminPolicyBasedExternalRoute{{
		ObjectMeta: metav1.ObjectMeta{Name: "gateways"},
		Spec: esv1.AdminPolicyBasedExternalRouteSpec{
			From:     esv1.ExternalNetworkSource{NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"egress": "gateways"}}},
			NextHops: esv1.ExternalNextHops{StaticHops: []esv1.StaticHop{{IP: gw1}, {IP: gw2}}},
		},
	}}
	cluster.ExternalRouteHops = dataplane.ExternalRouteNode{MAC: func(a netip.Addr) (net.HardwareAddr, bool) {
		mac, ok := gwMACs[a.String()]
		return mac, ok
	}}
	cluster.EgressFirewalls = []*esv1.EgressFirewall{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleDeny, To: esv1.EgressFirewallDestination{CIDRSelector: "203.0.113.0/24"}},
		}},
	}}
	// An EgressIP held by n2 selects one more pod of shop on n1.
	const eipPod, egressIP = "10.244.1.40", "192.0.2.50"
	cluster.EgressIPs = []*esv1.EgressIP{{
		ObjectMeta: metav1.ObjectMeta{Name: "billing"},
		Spec: esv1.EgressIPSpec{EgressIPs: []string{egressIP},
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"egress": "gateways"}},
			PodSelector:       esv1.LabelSelector{MatchLabels: map[string]string{"app": "eip"}}},
		Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: egressIP, Node: "n2"}}},
	}}
	cluster.Pods = append(cluster.Pods, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "eip", Labels: map[string]string{"app": "eip"}},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: eipPod}}},
	})
	cluster.EgressQoSes = []*esv1.EgressQoS{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressQoSName},
		Spec:       esv1.EgressQoSSpec{Egress: []esv1.EgressQoSRule{{DSCP: 46}}},
	}}
	n1 := nodeConfig("n1")
	state := dataplane.Compute(n1, cluster, routingTables)
	if len(state.ExternalRoute.Parts) != 1 || len(state.ExternalRoute.Problems) > 0 {
		t.Fatalf("external route parts %+v, problems %v", state.ExternalRoute.Parts, state.ExternalRoute.Problems)
	}
	part := state.ExternalRoute.Parts[0]
	v4 := slices.IndexFunc(part.Routes, func(r dataplane.ExternalRoute) bool { return r.Family == 0 })
	group := part.Routes[v4].Group
	bridgeMAC, _ := net.ParseMAC(n1MAC)
	tables, err := trace.New(append(dataplane.Flows(n1, state, dataplane.Ports{Uplink: uplink, BridgeMAC: bridgeMAC}), trace.DefaultFlow()))
	if err != nil {
		t.Fatal(err)
	}
	routedOut := func(src, dst string, ct trace.Conntrack) trace.Result {
		t.Helper()
		return mustTrace(t, tables, trace.Packet{InPort: openflow.PortLocal, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
			Proto: trace.ProtoTCP, SrcPort: 40000, DstPort: 443}, ct)
	}
	toGroup := func(name string, r trace.Result) {
		t.Helper()
		if len(r.Groups) != 1 || r.Groups[0].Group != group || len(r.Emits) != 0 {
			t.Errorf("%s: want the packet handed to group %d only, got\n%v", name, group, r)
			return
		}
		if p := r.Groups[0].Packet; p.DSCP != 46 || p.Regs[7] == 0 {
			t.Errorf("%s: handed to the group without its DSCP or route: %v", name, p)
		}
	}

	toGroup("a bystander", routedOut("10.244.1.9", "198.51.100.7", trace.Conntrack{}))
	toGroup("net's endpoint (Network mode)", routedOut("10.244.1.8", "198.51.100.7", trace.Conntrack{}))
	if slices.ContainsFunc(state.Rules, func(r dataplane.Rule) bool { return r.Source == netip.MustParseAddr("10.244.1.8") }) {
		t.Errorf("net's endpoint is routed through the gateways, yet its ip rule is kept: %v", state.Rules)
	}

	// A connection that came in through gw2 (or was given it) goes back
	// through gw2, group or not.
	est := openflow.CTStateTrk | openflow.CTStateEst
	established := trace.Conntrack{States: []uint32{est, est}, Labels: [][16]byte{{}, netip.MustParseAddr(gw2).As16()}}
	// The first recirculation is the firewall's (no label), the second the
	// route's.
	r := routedOut("10.244.1.9", "198.51.100.7", established)
	if len(r.Emits) != 1 || r.Emits[0].Port != uplink || r.Emits[0].Packet.EthDst != trace.MACFrom(gwMACs[gw2]) ||
		r.Emits[0].Packet.Src != netip.MustParseAddr("10.244.1.9") || len(r.Groups) != 0 {
		t.Errorf("an established connection through %s: want it out of the uplink to %s's MAC with its pod IP, got\n%v", gw2, gw2, r)
	}

	if r := routedOut("10.244.1.9", "203.0.113.7", trace.Conntrack{}); !r.Dropped() {
		t.Errorf("a packet the firewall denies was not dropped:\n%v", r)
	}
	if r := routedOut("10.244.1.5", "198.51.100.7", trace.Conntrack{}); len(r.Emits) != 1 || r.Emits[0].Packet.Src != netip.MustParseAddr("192.0.2.10") {
		t.Errorf("web's endpoint did not leave with its LB IP:\n%v", r)
	}
	n2, _ := net.ParseMAC(n2MAC)
	if r := routedOut("10.244.1.6", "198.51.100.7", trace.Conntrack{}); len(r.Emits) != 1 || r.Emits[0].Packet.EthDst != trace.MACFrom(n2) {
		t.Errorf("api's endpoint was not steered to its host n2:\n%v", r)
	}
	if r := routedOut(eipPod, "198.51.100.7", trace.Conntrack{}); len(r.Emits) != 1 || r.Emits[0].Packet.EthDst != trace.MACFrom(n2) || len(r.Groups) != 0 {
		t.Errorf("the EgressIP's pod was not steered to its holder n2:\n%v", r)
	}
	for _, src := range []string{"10.244.1.7", "10.244.1.10"} {
		if r := routedOut(src, "198.51.100.7", trace.Conntrack{}); !r.Dropped() {
			t.Errorf("%s (db's endpoint without a known host, the held pod) was not dropped:\n%v", src, r)
		}
	}
	// No IPv6 gateway listed: the IPv6 route's group has no bucket, and
	// drops what it is handed.
	v6 := slices.IndexFunc(part.Routes, func(r dataplane.ExternalRoute) bool { return r.Family == 1 })
	if v6 < 0 || len(part.Routes[v6].Gateways) != 0 {
		t.Fatalf("want an IPv6 route without gateways: %+v", part.Routes)
	}
	if r := routedOut("fd00:10:244:1::9", "2001:db8:ff::1", trace.Conntrack{}); len(r.Emits) != 0 || len(r.Groups) != 1 || r.Groups[0].Group != part.Routes[v6].Group {
		t.Errorf("the bystander's IPv6 packet (no IPv6 gateway listed): want it handed to group %d (no bucket) only, got\n%v", part.Routes[v6].Group, r)
	}
	for _, g := range part.AppendGroups(nil, dataplane.Ports{Uplink: uplink}) {
		if g.GroupID == part.Routes[v6].Group && len(g.Buckets) != 0 {
			t.Errorf("the IPv6 route's group has buckets: %v", g)
		}
	}

	// From gw1 to the bystander: the gateway recorded, then the
	// firewall's inbound commit and NORMAL.
	in := mustTrace(t, tables, trace.Packet{InPort: uplink, EthSrc: trace.MACFrom(gwMACs[gw1]), Src: netip.MustParseAddr("198.51.100.7"),
		Dst: netip.MustParseAddr("10.244.1.9"), Proto: trace.ProtoTCP, SrcPort: 443, DstPort: 40000}, trace.Conntrack{})
	var kinds []dataplane.FlowKind
	for _, h := range in.Hits {
		if h.Flow != nil {
			f, _ := dataplane.DecodeCookie(h.Flow.Cookie)
			kinds = append(kinds, f.Kind)
		}
	}
	if !slices.Equal(kinds, []dataplane.FlowKind{dataplane.KindExternalRouteInbound, dataplane.KindFirewallInbound}) ||
		len(in.Emits) != 1 || in.Emits[0].Port != openflow.PortNormal {
		t.Errorf("a packet from %s to a routed pod: want the gateway recorded, then the firewall's inbound commit and NORMAL, got\n%v", gw1, in)
	}
}
