package trace_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/openflow"
)

// TestCrossCheckFirewallFlows installs the TableFirewall that
// dataplane.ComputeFirewall and FirewallFlows render (EgressFirewall,
// issue 19; not wired into the agent yet) on a real bridge, behind a table
// 0 that sends every packet to TableFirewall and a TableQoS that sends it
// out of the uplink. Open vSwitch accepts them (one bundle), and the
// tracer and ofproto/trace agree on whether each generated packet is
// dropped or let out, and on every flow it hits on the way;
// dataplane's TestFirewallMatchesSpecification holds the tracer's answers
// to the API's rule. Fragments among the packets: ofproto/trace reads
// their ports as 0 as the tracer does, and the Deny rules with ports drop
// them.
func TestCrossCheckFirewallFlows(t *testing.T) {
	b := startBridge(t)
	t.Logf("seed %d", crossCheckSeed)
	rnd := rand.New(rand.NewPCG(crossCheckSeed, 19))

	selector := func(role string) *esv1.LabelSelector {
		return &esv1.LabelSelector{MatchLabels: map[string]string{"role": role}}
	}
	port := func(protocol string, n int32) esv1.EgressFirewallPort {
		return esv1.EgressFirewallPort{Protocol: protocol, Port: n}
	}
	rule := func(deny bool, to esv1.EgressFirewallDestination, ports ...esv1.EgressFirewallPort) esv1.EgressFirewallRule {
		r := esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleAllow, To: to, Ports: ports}
		if deny {
			r.Type = esv1.EgressFirewallRuleDeny
		}
		return r
	}
	firewalls := []*esv1.EgressFirewall{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "default"}, Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			rule(false, esv1.EgressFirewallDestination{DNSName: "api.example.com"}, port("TCP", 443), port("UDP", 443)),
			rule(true, esv1.EgressFirewallDestination{NodeSelector: selector("infra")}),
			rule(false, esv1.EgressFirewallDestination{CIDRSelector: "203.0.113.0/25"}),
			rule(true, esv1.EgressFirewallDestination{CIDRSelector: "203.0.113.0/24"}, port("SCTP", 80), port("TCP", 80)),
			rule(false, esv1.EgressFirewallDestination{CIDRSelector: "2001:db8:ff::/64"}, port("UDP", 53)),
			rule(true, esv1.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}),
			rule(true, esv1.EgressFirewallDestination{CIDRSelector: "::/0"}),
		}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "bank", Name: "default"}, Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			rule(true, esv1.EgressFirewallDestination{CIDRSelector: "198.51.100.0/24"}, port("UDP", 53)),
			rule(true, esv1.EgressFirewallDestination{CIDRSelector: "2001:db8:fe::/64"}, port("UDP", 53)),
		}}},
	}
	pod := func(ns string, ips ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ips[0]},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("shop", "10.244.1.5", "fd00:10:244:1::5"),
		pod("shop", "10.244.1.6"),
		pod("bank", "10.244.1.8", "fd00:10:244:1::8"),
		pod("free", "10.244.1.9"),
	}
	nodes := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"role": "infra"}}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "172.18.0.12"}, {Type: corev1.NodeInternalIP, Address: "fd00:172:18::12"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n3"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "172.18.0.13"}}}},
	}
	resolved := map[string][]netip.Addr{"api.example.com": {netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:ff::7")}}
	fw := dataplane.ComputeFirewall(nodeConfig("n1"), firewalls, pods, nodes, resolved)
	if len(fw.Problems) != 0 {
		t.Fatalf("problems: %+v", fw.Problems)
	}
	flows := append([]*openflow.FlowMod{
		{Command: openflow.FlowAdd, Cookie: dataplane.CookiePrefix, Table: dataplane.TableClassify, Priority: 1,
			Instructions: []openflow.Instruction{openflow.GotoTable{Table: dataplane.TableFirewall}}},
		{Command: openflow.FlowAdd, Cookie: dataplane.CookiePrefix, Table: dataplane.TableQoS, Priority: 1,
			Instructions: []openflow.Instruction{openflow.Apply(openflow.Output{Port: b.uplink})}},
	}, dataplane.FirewallFlows(fw)...)
	b.install(t, flows, dataplane.CookiePrefix, dataplane.CookiePrefixMask)

	sources := []string{"10.244.1.5", "fd00:10:244:1::5", "10.244.1.6", "10.244.1.8", "fd00:10:244:1::8", "10.244.1.9",
		"10.244.1.99", "fd00:10:244:1::99"}
	destinations := []string{"198.51.100.7", "198.51.100.8", "203.0.113.1", "203.0.113.200", "192.0.2.1", "172.18.0.12",
		"172.18.0.13", "10.244.2.9", "10.96.0.10", "2001:db8:ff::7", "2001:db8:ff::8", "2001:db8:fe::1", "fd00:172:18::12",
		"fd00:10:244:2::9", "fd00:10:96::1"}
	probes := make([]probe, 2*packetsPerScenario)
	for i := range probes {
		src, dst := pickPair(rnd, sources, destinations)
		p := trace.Packet{InPort: openflow.PortLocal, EthSrc: randomMAC(rnd), EthDst: randomMAC(rnd), Src: src, Dst: dst}
		randomTransport(rnd, &p)
		if rnd.IntN(4) > 0 && (p.Proto == trace.ProtoTCP || p.Proto == trace.ProtoUDP || p.Proto == trace.ProtoSCTP) {
			p.DstPort = pick(rnd, []uint16{53, 80, 443})
		}
		probes[i] = probe{packet: p, state: openflow.CTStateTrk | openflow.CTStateNew}
	}
	// A packet for each port rule, which random packets reach rarely.
	for _, p := range []trace.Packet{
		{Src: netip.MustParseAddr("10.244.1.5"), Dst: netip.MustParseAddr("198.51.100.7"), Proto: trace.ProtoTCP, DstPort: 443},
		{Src: netip.MustParseAddr("10.244.1.6"), Dst: netip.MustParseAddr("198.51.100.7"), Proto: trace.ProtoUDP, DstPort: 443},
		{Src: netip.MustParseAddr("fd00:10:244:1::5"), Dst: netip.MustParseAddr("2001:db8:ff::7"), Proto: trace.ProtoTCP, DstPort: 443},
		{Src: netip.MustParseAddr("fd00:10:244:1::5"), Dst: netip.MustParseAddr("2001:db8:ff::7"), Proto: trace.ProtoUDP, DstPort: 443},
		{Src: netip.MustParseAddr("fd00:10:244:1::5"), Dst: netip.MustParseAddr("2001:db8:ff::8"), Proto: trace.ProtoUDP, DstPort: 53},
		{Src: netip.MustParseAddr("10.244.1.5"), Dst: netip.MustParseAddr("203.0.113.200"), Proto: trace.ProtoSCTP, DstPort: 80},
		{Src: netip.MustParseAddr("10.244.1.6"), Dst: netip.MustParseAddr("203.0.113.200"), Proto: trace.ProtoTCP, DstPort: 80},
		{Src: netip.MustParseAddr("10.244.1.8"), Dst: netip.MustParseAddr("198.51.100.9"), Proto: trace.ProtoUDP, DstPort: 53},
		{Src: netip.MustParseAddr("fd00:10:244:1::8"), Dst: netip.MustParseAddr("2001:db8:fe::1"), Proto: trace.ProtoUDP, DstPort: 53},
	} {
		p.InPort, p.EthSrc, p.EthDst, p.SrcPort = openflow.PortLocal, randomMAC(rnd), randomMAC(rnd), 40000
		probes = append(probes, probe{packet: p, state: openflow.CTStateTrk | openflow.CTStateNew})
	}
	// Fragments, first and later, whose ports the bridge reads as 0: to
	// the destinations of the Deny rules with ports (dropped), to the
	// address and port rule 0 allows (dropped by rule 5, as no rule
	// without ports comes before it), to an address rule 2 allows without
	// ports (let out), and in IPv6 to the port rule 4 allows (dropped by
	// rule 6). Each fragment of a namespace's Deny with ports hits that
	// rule's fragment flow; but an IPv6 fragment after the first is
	// protocol 44 to the bridge, which no such flow names: bank's goes on
	// (its first fragment, dropped, is what its destination cannot do
	// without).
	fragmentsDropped := map[int]bool{} // by index in probes
	const first, later = openflow.IPFragAny, openflow.IPFragAny | openflow.IPFragLater
	for _, f := range []struct {
		src, dst string
		proto    uint8
		port     uint16
		frag     uint8
		dropped  bool
	}{
		{"10.244.1.5", "203.0.113.200", trace.ProtoSCTP, 80, first, true},
		{"10.244.1.5", "203.0.113.200", trace.ProtoSCTP, 80, later, true},
		{"10.244.1.6", "203.0.113.200", trace.ProtoTCP, 8080, first, true},
		{"10.244.1.6", "203.0.113.200", trace.ProtoTCP, 8080, later, true},
		{"10.244.1.8", "198.51.100.9", trace.ProtoUDP, 53, first, true},
		{"10.244.1.8", "198.51.100.9", trace.ProtoUDP, 53, later, true},
		{"fd00:10:244:1::8", "2001:db8:fe::1", trace.ProtoUDP, 53, first, true},
		{"fd00:10:244:1::8", "2001:db8:fe::1", trace.ProtoUDP, 53, later, false},
		{"10.244.1.5", "198.51.100.7", trace.ProtoTCP, 443, first, true},
		{"10.244.1.5", "198.51.100.7", trace.ProtoTCP, 443, later, true},
		{"10.244.1.6", "203.0.113.1", trace.ProtoUDP, 80, first, false},
		{"10.244.1.6", "203.0.113.1", trace.ProtoUDP, 80, later, false},
		{"fd00:10:244:1::5", "2001:db8:ff::8", trace.ProtoUDP, 53, first, true},
		{"fd00:10:244:1::5", "2001:db8:ff::8", trace.ProtoUDP, 53, later, true},
		{"10.244.1.9", "203.0.113.200", trace.ProtoTCP, 80, first, false}, // free has no EgressFirewall
		{"10.244.1.9", "203.0.113.200", trace.ProtoTCP, 80, later, false},
	} {
		p := trace.Packet{InPort: openflow.PortLocal, EthSrc: randomMAC(rnd), EthDst: randomMAC(rnd),
			Src: netip.MustParseAddr(f.src), Dst: netip.MustParseAddr(f.dst), Proto: f.proto, SrcPort: 40000, DstPort: f.port, Frag: f.frag}
		fragmentsDropped[len(probes)] = f.dropped
		probes = append(probes, probe{packet: p, state: openflow.CTStateTrk | openflow.CTStateNew})
	}
	// DNS replies to pods, over UDP and TCP, in from the uplink: paused for
	// the controller for the namespace with a dnsName rule (shop), not for
	// another.
	for _, dst := range []string{"10.244.1.5", "fd00:10:244:1::5", "10.244.1.6", "10.244.1.8"} {
		d := netip.MustParseAddr(dst)
		src := netip.MustParseAddr("198.51.100.53")
		if d.Is6() {
			src = netip.MustParseAddr("2001:db8:ff::53")
		}
		for _, proto := range []uint8{trace.ProtoUDP, trace.ProtoTCP} {
			p := trace.Packet{InPort: b.uplink, EthSrc: randomMAC(rnd), EthDst: randomMAC(rnd), Src: src, Dst: d,
				Proto: proto, SrcPort: 53, DstPort: 40000}
			probes = append(probes, probe{packet: p, state: openflow.CTStateTrk | openflow.CTStateNew})
		}
	}
	// Packets from outside to each firewalled pod (committed inbound), a
	// pod's reply to a connection the outside opened (passes, though the
	// rules deny its destination), and a classified packet no rule judges
	// in each family (committed).
	for _, dst := range []string{"10.244.1.5", "10.244.1.6", "fd00:10:244:1::5", "10.244.1.8", "fd00:10:244:1::8"} {
		d := netip.MustParseAddr(dst)
		src := netip.MustParseAddr("203.0.113.9")
		if d.Is6() {
			src = netip.MustParseAddr("2001:db8:fe::9")
		}
		p := trace.Packet{InPort: b.uplink, EthSrc: randomMAC(rnd), EthDst: randomMAC(rnd), Src: src, Dst: d,
			Proto: trace.ProtoTCP, SrcPort: 40000, DstPort: 8080}
		probes = append(probes, probe{packet: p, state: openflow.CTStateTrk | openflow.CTStateNew})
	}
	for _, c := range []struct {
		src, dst         string
		srcPort, dstPort uint16
		state            uint32
	}{
		{"10.244.1.5", "203.0.113.200", 8080, 40000, openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl},
		{"fd00:10:244:1::5", "2001:db8:fe::1", 8080, 40000, openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl},
		{"10.244.1.8", "203.0.113.1", 40000, 80, openflow.CTStateTrk | openflow.CTStateNew},
		{"fd00:10:244:1::8", "2001:db8:fe::1", 40000, 80, openflow.CTStateTrk | openflow.CTStateNew},
	} {
		p := trace.Packet{InPort: openflow.PortLocal, EthSrc: randomMAC(rnd), EthDst: randomMAC(rnd),
			Src: netip.MustParseAddr(c.src), Dst: netip.MustParseAddr(c.dst), Proto: trace.ProtoTCP, SrcPort: c.srcPort, DstPort: c.dstPort}
		probes = append(probes, probe{packet: p, state: c.state})
	}
	results := crossCheck(t, b, flows, probes)
	if len(results) == len(probes) {
		for i, dropped := range fragmentsDropped {
			if results[i].Dropped() != dropped {
				t.Errorf("fragment %v: dropped %v, want %v:\n%v", probes[i].packet, results[i].Dropped(), dropped, results[i])
			}
		}
	}
	ends := coverage(t, flows, probes, results)
	// Both ends, and every kind of flow, must be among the paths, or
	// agreement proves less.
	if ends["drop"] == 0 || ends["out "+openflow.PortName(b.uplink)] == 0 {
		t.Errorf("ends %v: want packets both dropped and let out", ends)
	}
	kinds := map[dataplane.FlowKind]int{}
	hit := map[*openflow.FlowMod]bool{}
	for _, r := range results {
		for _, h := range r.Hits {
			hit[h.Flow] = true
			if c, ok := dataplane.DecodeCookie(h.Flow.Cookie); ok {
				kinds[c.Kind]++
			}
		}
	}
	if len(hit) != len(flows) {
		t.Errorf("%d of %d flows hit: agreement on the rest is untested", len(hit), len(flows))
	}
	for _, k := range []dataplane.FlowKind{dataplane.KindFirewallClassify, dataplane.KindFirewallDeny, dataplane.KindFirewallAllow, dataplane.KindFirewallPass} {
		if kinds[k] == 0 {
			t.Errorf("no packet hit a flow of kind %#x (%v)", k, kinds)
		}
	}
}
