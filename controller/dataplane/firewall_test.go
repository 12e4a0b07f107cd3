package dataplane

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane/trace"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/openflow"
)

func egressFirewall(ns, name string, rules ...esv1.EgressFirewallRule) *esv1.EgressFirewall {
	return &esv1.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: esv1.EgressFirewallSpec{Egress: rules}}
}

func allowTo(to esv1.EgressFirewallDestination, ports ...esv1.EgressFirewallPort) esv1.EgressFirewallRule {
	return esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleAllow, To: to, Ports: ports}
}

func denyTo(to esv1.EgressFirewallDestination, ports ...esv1.EgressFirewallPort) esv1.EgressFirewallRule {
	return esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleDeny, To: to, Ports: ports}
}

func cidrTo(c string) esv1.EgressFirewallDestination {
	return esv1.EgressFirewallDestination{CIDRSelector: c}
}
func dnsTo(n string) esv1.EgressFirewallDestination {
	return esv1.EgressFirewallDestination{DNSName: n}
}
func nodesTo(kv ...string) esv1.EgressFirewallDestination {
	s := matchLabels(kv...)
	return esv1.EgressFirewallDestination{NodeSelector: &s}
}

// labelledNode is a Node with an InternalIP, an ExternalIP (if external is
// not empty) and labels.
func labelledNode(name, internal, external string, l map[string]string) *corev1.Node {
	n := node(name, internal)
	n.Labels = l
	if external != "" {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: external})
	}
	return n
}

// TestFirewallFlowsText pins TableFirewall for a small state to the text of
// `ovs-ofctl -O OpenFlow15 dump-flows`: the exemptions (pod and service
// CIDRs, not node IPs) and the default; a dual-stack pod classified once
// per address; an Allow by name (written in capitals with a final dot) on
// two ports in both families; a Deny of the infra nodes' two addresses; a
// Deny of everything on one SCTP port (the /0 needs no match); an Allow of
// an IPv6 CIDR written with host bits; a Deny by name on three ports of
// two protocols; and nothing for the pod of another node or the namespace
// without local pods. Each Deny with ports has a flow per destination and
// protocol that drops the protocol's fragments (nw_frag=yes), with the
// rule's note; the Allows with ports have none. FirewallAnswers reads the
// names' addresses back from the flows, and nothing else.
func TestFirewallFlowsText(t *testing.T) {
	nodes := []*corev1.Node{
		labelledNode("n2", "192.0.2.12", "198.51.100.12", map[string]string{"role": "infra"}),
		labelledNode("n3", "192.0.2.13", "", map[string]string{"role": "app"}),
	}
	fw := ComputeFirewall(n1Config, []*esv1.EgressFirewall{
		egressFirewall("shop", "default",
			allowTo(dnsTo("WWW.example.com."), esv1.EgressFirewallPort{Protocol: "UDP", Port: 53}, esv1.EgressFirewallPort{Protocol: "TCP", Port: 443}),
			denyTo(nodesTo("role", "infra")),
			denyTo(cidrTo("0.0.0.0/0"), esv1.EgressFirewallPort{Protocol: "SCTP", Port: 9}),
			allowTo(cidrTo("2001:db8::1/64")),
			denyTo(dnsTo("blocked.example"), esv1.EgressFirewallPort{Protocol: "UDP", Port: 5353},
				esv1.EgressFirewallPort{Protocol: "TCP", Port: 443}, esv1.EgressFirewallPort{Protocol: "UDP", Port: 53})),
		egressFirewall("idle", "default", denyTo(cidrTo("0.0.0.0/0"))),
	}, []*corev1.Pod{
		pod("shop", "n1", nil, "10.244.1.5", "fd00:10:244:1::5"),
		pod("shop", "n2", nil, "10.244.2.5"),
		pod("idle", "n2", nil, "10.244.2.6"),
	}, nodes, map[string][]netip.Addr{"www.example.com": addrs("203.0.113.7", "2001:db8::7", "203.0.113.7"),
		"blocked.example": addrs("203.0.113.9", "2001:db8::9")})
	if len(fw.Problems) != 0 {
		t.Fatalf("problems: %+v", fw.Problems)
	}
	if len(fw.Namespaces) != 1 {
		t.Fatalf("namespaces %+v, want shop's only", fw.Namespaces)
	}
	var got []string
	for _, f := range FirewallFlows(fw) {
		got = append(got, f.String())
	}
	id := fmt.Sprintf("%#x", fw.Namespaces[0].ID)
	cookie := func(kind FlowKind) string { return fmt.Sprintf("%#x", Cookie(kind, "EgressFirewall/shop/default")) }
	// The name's rule flows carry it in a note: "www.example.com" in hex,
	// padded with zeros to the action's 8-byte boundary.
	const noteWWW = "note:77.77.77.2e.65.78.61.6d.70.6c.65.2e.63.6f.6d.00.00.00.00.00.00.00"
	// "blocked.example", padded alike.
	const noteBlocked = "note:62.6c.6f.63.6b.65.64.2e.65.78.61.6d.70.6c.65.00.00.00.00.00.00.00"
	want := []string{
		"cookie=0xef10440000000006, table=44, priority=12000,ip,nw_dst=10.96.0.0/16 actions=resubmit(,45)",
		"cookie=0xef10440000000006, table=44, priority=12000,ip,nw_dst=10.244.0.0/16 actions=resubmit(,45)",
		"cookie=0xef10440000000006, table=44, priority=12000,ipv6,ipv6_dst=fd00:10:244::/48 actions=resubmit(,45)",
		"cookie=0xef10440000000006, table=44, priority=10500,ct_state=+rpl+trk,ip actions=resubmit(,45)",
		"cookie=0xef10440000000006, table=44, priority=1,ct_state=+trk,ip actions=ct(commit,zone=61190),resubmit(,45)",
		"cookie=0xef10440000000006, table=44, priority=10500,ct_state=+rpl+trk,ipv6 actions=resubmit(,45)",
		"cookie=0xef10440000000006, table=44, priority=1,ct_state=+trk,ipv6 actions=ct(commit,zone=61190),resubmit(,45)",
		"cookie=0xef10440000000006, table=44, priority=0 actions=resubmit(,45)",
		"cookie=" + cookie(KindFirewallClassify) + ", table=44, priority=11000,ip,reg4=0,nw_src=10.244.1.5 actions=set_field:" + id + "->reg4,ct(table=44,zone=61190)",
		"cookie=" + cookie(KindFirewallClassify) + ", table=44, priority=11000,ipv6,reg4=0,ipv6_src=fd00:10:244:1::5 actions=set_field:" + id + "->reg4,ct(table=44,zone=61190)",
		"cookie=" + cookie(KindFirewallInbound) + ", priority=205,ip,nw_dst=10.244.1.5 actions=ct(commit,zone=61190),NORMAL",
		"cookie=" + cookie(KindFirewallInbound) + ", priority=205,ipv6,ipv6_dst=fd00:10:244:1::5 actions=ct(commit,zone=61190),NORMAL",
		"cookie=" + cookie(KindFirewallSnoop) + ", priority=210,udp,nw_dst=10.244.1.5,tp_src=53 actions=ct(commit,zone=61190),controller(pause),NORMAL",
		"cookie=" + cookie(KindFirewallSnoop) + ", priority=210,tcp,nw_dst=10.244.1.5,tp_src=53 actions=ct(commit,zone=61190),controller(pause),NORMAL",
		"cookie=" + cookie(KindFirewallSnoop) + ", priority=210,udp6,ipv6_dst=fd00:10:244:1::5,tp_src=53 actions=ct(commit,zone=61190),controller(pause),NORMAL",
		"cookie=" + cookie(KindFirewallSnoop) + ", priority=210,tcp6,ipv6_dst=fd00:10:244:1::5,tp_src=53 actions=ct(commit,zone=61190),controller(pause),NORMAL",
		"cookie=" + cookie(KindFirewallAllow) + ", table=44, priority=10000,tcp,reg4=" + id + ",nw_dst=203.0.113.7,tp_dst=443 actions=" + noteWWW + ",ct(commit,zone=61190),resubmit(,45)",
		"cookie=" + cookie(KindFirewallAllow) + ", table=44, priority=10000,udp,reg4=" + id + ",nw_dst=203.0.113.7,tp_dst=53 actions=" + noteWWW + ",ct(commit,zone=61190),resubmit(,45)",
		"cookie=" + cookie(KindFirewallAllow) + ", table=44, priority=10000,tcp6,reg4=" + id + ",ipv6_dst=2001:db8::7,tp_dst=443 actions=" + noteWWW + ",ct(commit,zone=61190),resubmit(,45)",
		"cookie=" + cookie(KindFirewallAllow) + ", table=44, priority=10000,udp6,reg4=" + id + ",ipv6_dst=2001:db8::7,tp_dst=53 actions=" + noteWWW + ",ct(commit,zone=61190),resubmit(,45)",
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9999,ip,reg4=" + id + ",nw_dst=192.0.2.12 actions=drop",
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9999,ip,reg4=" + id + ",nw_dst=198.51.100.12 actions=drop",
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9998,sctp,reg4=" + id + ",tp_dst=9 actions=drop",
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9998,sctp,reg4=" + id + ",nw_frag=yes actions=drop",
		"cookie=" + cookie(KindFirewallAllow) + ", table=44, priority=9997,ipv6,reg4=" + id + ",ipv6_dst=2001:db8::/64 actions=ct(commit,zone=61190),resubmit(,45)",
		// A Deny with ports also drops every fragment of each of its
		// protocols to each destination; the Allow above gets none.
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,tcp,reg4=" + id + ",nw_dst=203.0.113.9,tp_dst=443 actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,udp,reg4=" + id + ",nw_dst=203.0.113.9,tp_dst=53 actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,udp,reg4=" + id + ",nw_dst=203.0.113.9,tp_dst=5353 actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,tcp,reg4=" + id + ",nw_dst=203.0.113.9,nw_frag=yes actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,udp,reg4=" + id + ",nw_dst=203.0.113.9,nw_frag=yes actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,tcp6,reg4=" + id + ",ipv6_dst=2001:db8::9,tp_dst=443 actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,udp6,reg4=" + id + ",ipv6_dst=2001:db8::9,tp_dst=53 actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,udp6,reg4=" + id + ",ipv6_dst=2001:db8::9,tp_dst=5353 actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,tcp6,reg4=" + id + ",ipv6_dst=2001:db8::9,nw_frag=yes actions=" + noteBlocked,
		"cookie=" + cookie(KindFirewallDeny) + ", table=44, priority=9996,udp6,reg4=" + id + ",ipv6_dst=2001:db8::9,nw_frag=yes actions=" + noteBlocked,
	}
	if !slices.Equal(got, want) {
		t.Errorf("flows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var installed []openflow.Flow
	for _, fm := range FirewallFlows(fw) {
		installed = append(installed, openflow.Flow{Table: fm.Table, Priority: fm.Priority, Cookie: fm.Cookie, Match: fm.Match, Instructions: fm.Instructions})
	}
	answers := FirewallAnswers(installed)
	if len(answers) != 2 || !slices.Equal(answers["www.example.com"], addrs("203.0.113.7", "2001:db8::7")) ||
		!slices.Equal(answers["blocked.example"], addrs("203.0.113.9", "2001:db8::9")) {
		t.Errorf("answers read back from the flows: %v; want www.example.com's two and blocked.example's two", answers)
	}
}

// firewallPipeline wraps TableFirewall in the least of a bridge that lets
// a test trace it (stagePipeline): a packet the firewall lets through
// leaves by TableQoS, one it drops emits nothing.
func firewallPipeline(t *testing.T, flows []*openflow.FlowMod) *trace.Tables {
	t.Helper()
	return stagePipeline(t, TableFirewall, TableQoS, flows)
}

// firewallPacket is what the specification judges: the addresses, the
// protocol, the destination port, and whether the packet is an IP
// fragment, and one after the first.
type firewallPacket struct {
	src, dst        netip.Addr
	proto           uint8
	port            uint16
	fragment, later bool
}

// firewallSpec is the API's rule, written from the seed and the issue and
// not from ComputeFirewall: a packet from a running pod of this node to a
// destination outside the cluster's pod and service CIDRs is checked
// against the rules of its namespace's EgressFirewall named default in
// order, and the first rule whose destination (the CIDR; an address the
// name resolves to, the name compared without case or final dot; an
// InternalIP or ExternalIP of a node the selector picks) and ports (any,
// with none listed) match decides: Deny drops it. Everything else is
// allowed. It reports whether the packet is allowed.
//
// A fragment is judged as docs/egressfirewall.md's "Fragments" says for a
// bridge whose connection tracker hands on fragments (the userspace
// datapath, which the tracer models): its ports are unknown, so a rule
// with ports matches it only if it is a Deny with a port of the
// fragment's protocol (failing closed), and a rule without ports as any
// packet. An IPv6 fragment after the first has no known protocol either
// (the bridge reads its Fragment header's): no rule with ports matches
// it.
func firewallSpec(node string, clusterCIDRs []netip.Prefix, fws []*esv1.EgressFirewall, pods []*corev1.Pod, nodes []*corev1.Node,
	resolved map[string][]netip.Addr, p firewallPacket) bool {
	for _, c := range clusterCIDRs {
		if c.Contains(p.dst) {
			return true
		}
	}
	var owner *corev1.Pod
	for _, pod := range pods {
		if pod.Spec.NodeName != node || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ip := range pod.Status.PodIPs {
			if netip.MustParseAddr(ip.IP) == p.src {
				owner = pod
			}
		}
	}
	if owner == nil {
		return true
	}
	protocols := map[string]uint8{"TCP": 6, "UDP": 17, "SCTP": 132}
	for _, fw := range fws {
		if fw.Namespace != owner.Namespace || fw.Name != "default" {
			continue
		}
		for _, r := range fw.Spec.Egress {
			to := false
			switch {
			case r.To.CIDRSelector != "":
				to = netip.MustParsePrefix(r.To.CIDRSelector).Contains(p.dst)
			case r.To.DNSName != "":
				to = slices.Contains(resolved[strings.TrimSuffix(strings.ToLower(r.To.DNSName), ".")], p.dst)
			case r.To.NodeSelector != nil:
				sel, err := metav1.LabelSelectorAsSelector(r.To.NodeSelector.AsMeta())
				if err != nil {
					continue
				}
				for _, n := range nodes {
					if !sel.Matches(labels.Set(n.Labels)) {
						continue
					}
					for _, a := range n.Status.Addresses {
						if (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) && netip.MustParseAddr(a.Address) == p.dst {
							to = true
						}
					}
				}
			}
			ports := len(r.Ports) == 0
			for _, port := range r.Ports {
				switch {
				case protocols[port.Protocol] != p.proto:
				case !p.fragment && uint16(port.Port) == p.port:
					ports = true
				case p.fragment && r.Type == esv1.EgressFirewallRuleDeny && !(p.later && p.dst.Is6()):
					ports = true
				}
			}
			if to && ports {
				return r.Type == esv1.EgressFirewallRuleAllow
			}
		}
	}
	return true
}

// TestFirewallMatchesSpecification traces random packets through the
// rendered TableFirewall of random objects, pods, nodes and DNS answers,
// and compares whether each is dropped with firewallSpec: whole, and as
// an IP fragment. The tracer also fails on two flows of one priority
// matching one packet, which would make OVS's choice undefined.
func TestFirewallMatchesSpecification(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 1))
	namespaces := []string{"a", "b", "c"}
	clusterCIDRs := slices.Concat(n1Config.ClusterPodCIDRs, n1Config.ServiceCIDRs)
	cidrs := []string{"203.0.113.0/24", "203.0.113.77/24", "203.0.113.128/25", "198.51.100.7/32", "0.0.0.0/0", "0.0.0.0/0",
		"192.0.2.0/24", "2001:db8::/32", "2001:db8:1::/48", "::/0", "::/0", "10.244.0.0/16"}
	names := []string{"api.example.com", "API.Example.com.", "cdn.example.net", "*.example.org", "gone.example"}
	pool := addrs("203.0.113.1", "203.0.113.200", "198.51.100.7", "198.51.100.8", "2001:db8::1", "2001:db9::1")
	dsts := append(addrs("192.0.2.1", "192.0.2.11", "192.0.2.12", "2001:db8:1::1", "2001:db8:2::12", "10.244.9.9", "10.96.0.10", "fd00:10:244:9::9", "8.8.8.8"), pool...)
	nodeAddrs := [][2]string{{"192.0.2.11", ""}, {"192.0.2.12", "2001:db8:2::12"}, {"192.0.2.13", "198.51.100.8"}}
	roles := []string{"infra", "app", ""}
	ports := []esv1.EgressFirewallPort{{Protocol: "TCP", Port: 80}, {Protocol: "TCP", Port: 443}, {Protocol: "UDP", Port: 53}, {Protocol: "SCTP", Port: 80}, {Protocol: "UDP", Port: 80}}
	randomDestination := func() esv1.EgressFirewallDestination {
		switch r.IntN(3) {
		case 0:
			return cidrTo(cidrs[r.IntN(len(cidrs))])
		case 1:
			return dnsTo(names[r.IntN(len(names))])
		}
		switch r.IntN(4) {
		case 0:
			return nodesTo() // every node
		case 1:
			return nodesTo("role", roles[r.IntN(2)])
		case 2:
			s := esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"infra"}}}}
			return esv1.EgressFirewallDestination{NodeSelector: &s}
		}
		s := esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpDoesNotExist}}}
		return esv1.EgressFirewallDestination{NodeSelector: &s}
	}
	denied, allowed := 0, 0
	fragDenied, fragOnlyDenied, fragAllowed := 0, 0, 0
	for round := range 300 {
		var fws []*esv1.EgressFirewall
		for _, ns := range namespaces {
			if r.IntN(8) == 0 {
				continue
			}
			name := "default"
			if r.IntN(8) == 0 {
				name = "other" // never counts
			}
			fw := egressFirewall(ns, name)
			for range 1 + r.IntN(6) {
				rule := esv1.EgressFirewallRule{Type: esv1.EgressFirewallRuleAllow, To: randomDestination()}
				if r.IntN(3) > 0 {
					rule.Type = esv1.EgressFirewallRuleDeny
				}
				for range max(0, r.IntN(5)-2) { // a third of the rules have ports
					rule.Ports = append(rule.Ports, ports[r.IntN(len(ports))])
				}
				fw.Spec.Egress = append(fw.Spec.Egress, rule)
			}
			fws = append(fws, fw)
		}
		var nodes []*corev1.Node
		for i, a := range nodeAddrs {
			l := map[string]string{}
			if role := roles[r.IntN(len(roles))]; role != "" {
				l["role"] = role
			}
			nodes = append(nodes, labelledNode(fmt.Sprintf("n%d", i+2), a[0], a[1], l))
		}
		resolved := map[string][]netip.Addr{}
		for _, n := range []string{"api.example.com", "cdn.example.net", "*.example.org"} { // gone.example: no answer
			if r.IntN(5) == 0 {
				continue // not resolved yet
			}
			resolved[n] = []netip.Addr{}
			for range r.IntN(4) {
				resolved[n] = append(resolved[n], pool[r.IntN(len(pool))])
			}
		}
		var pods []*corev1.Pod
		var sources []netip.Addr
		for i := range 2 + r.IntN(6) {
			nodeName := "n1"
			if r.IntN(5) == 0 {
				nodeName = "n2"
			}
			ips := []string{fmt.Sprintf("10.244.1.%d", i+1)}
			if r.IntN(2) == 0 {
				ips = append(ips, fmt.Sprintf("fd00:10:244:1::%d", i+1))
			}
			p := pod(namespaces[r.IntN(len(namespaces))], nodeName, nil, ips...)
			if r.IntN(10) == 0 {
				p.Status.Phase = corev1.PodFailed
			}
			pods = append(pods, p)
			for _, ip := range ips {
				sources = append(sources, netip.MustParseAddr(ip))
			}
		}
		sources = append(sources, addrs("10.244.1.200", "fd00:10:244:1::200")...) // no pod's

		fw := ComputeFirewall(n1Config, fws, pods, nodes, resolved)
		tables := firewallPipeline(t, FirewallFlows(fw))
		for _, src := range sources {
			for _, dst := range dsts {
				if src.Is4() != dst.Is4() {
					continue
				}
				p := firewallPacket{src: src, dst: dst}
				switch r.IntN(5) {
				case 0:
					p.proto = trace.ProtoICMP
					if src.Is6() {
						p.proto = trace.ProtoICMPv6
					}
				case 1:
					p.proto, p.port = trace.ProtoUDP, []uint16{53, 80, 5353}[r.IntN(3)]
				case 2:
					p.proto, p.port = trace.ProtoSCTP, []uint16{80, 81}[r.IntN(2)]
				default:
					p.proto, p.port = trace.ProtoTCP, []uint16{80, 443, 8080}[r.IntN(3)]
				}
				packet := trace.Packet{InPort: openflow.PortLocal, Src: src, Dst: dst, Proto: p.proto, SrcPort: 40000, DstPort: p.port}
				if p.proto == trace.ProtoICMP || p.proto == trace.ProtoICMPv6 {
					packet.SrcPort, packet.DstPort, packet.ICMPType = 0, 0, 8
				}
				res, err := tables.Trace(packet, trace.Conntrack{})
				if err != nil {
					t.Fatalf("round %d: %+v: %v", round, p, err)
				}
				if len(res.Emits) > 1 || (len(res.Emits) == 1 && res.Emits[0].Port != 1) {
					t.Fatalf("round %d: %+v left more than once or elsewhere:\n%v", round, p, res)
				}
				got := len(res.Emits) == 1
				want := firewallSpec("n1", clusterCIDRs, fws, pods, nodes, resolved, p)
				if got != want {
					t.Fatalf("round %d: %v -> %v proto %d port %d: allowed %v, want %v\nobjects: %s\nresolved %v\npath:\n%v",
						round, src, dst, p.proto, p.port, got, want, describeFirewalls(fws, pods, nodes), resolved, res)
				}
				// The same packet of an established connection the pod
				// opened is judged alike (a rule change cuts it); of one
				// the outside opened (the reply direction), never.
				for _, c := range []struct {
					state uint32
					want  bool
				}{{openflow.CTStateTrk | openflow.CTStateEst, want}, {openflow.CTStateTrk | openflow.CTStateEst | openflow.CTStateRpl, true}} {
					res, err := tables.Trace(packet, trace.Conntrack{States: []uint32{c.state}})
					if err != nil {
						t.Fatalf("round %d: %+v: %v", round, p, err)
					}
					if got := len(res.Emits) == 1; got != c.want {
						t.Fatalf("round %d: %v -> %v proto %d port %d, ct_state %s: allowed %v, want %v\npath:\n%v",
							round, src, dst, p.proto, p.port, trace.CTStateString(c.state, "|"), got, c.want, res)
					}
				}
				if got {
					allowed++
				} else {
					denied++
				}
				// The same datagram in fragments: the first fragment or
				// a later one, whose ports the bridge reads as 0.
				frag := packet
				frag.Frag = []uint8{openflow.IPFragAny, openflow.IPFragAny | openflow.IPFragLater}[r.IntN(2)]
				res, err = tables.Trace(frag, trace.Conntrack{})
				if err != nil {
					t.Fatalf("round %d: %+v, a fragment: %v", round, p, err)
				}
				fp := p
				fp.fragment, fp.later = true, frag.Frag&openflow.IPFragLater != 0
				gotFrag, wantFrag := len(res.Emits) == 1, firewallSpec("n1", clusterCIDRs, fws, pods, nodes, resolved, fp)
				if gotFrag != wantFrag {
					t.Fatalf("round %d: a fragment (%#x) %v -> %v proto %d port %d: allowed %v, want %v\nobjects: %s\nresolved %v\npath:\n%v",
						round, frag.Frag, src, dst, p.proto, p.port, gotFrag, wantFrag, describeFirewalls(fws, pods, nodes), resolved, res)
				}
				switch {
				case !gotFrag && got:
					fragOnlyDenied++
				case !gotFrag:
					fragDenied++
				default:
					fragAllowed++
				}
			}
		}
	}
	t.Logf("%d packets denied, %d allowed; in fragments, %d denied as the whole datagram is, %d denied though the whole datagram is allowed, %d allowed",
		denied, allowed, fragDenied, fragOnlyDenied, fragAllowed)
	// A comparison that never sees a drop (or never an allowed packet)
	// proves little; nor one whose fragments are never dropped for a Deny
	// with ports alone.
	if denied < 1000 || allowed < 1000 {
		t.Errorf("%d packets denied and %d allowed; want many of both", denied, allowed)
	}
	if fragDenied < 1000 || fragAllowed < 1000 || fragOnlyDenied < 100 {
		t.Errorf("fragments: %d denied, %d denied though the datagram is allowed, %d allowed; want many of each", fragDenied, fragOnlyDenied, fragAllowed)
	}
}

func describeFirewalls(fws []*esv1.EgressFirewall, pods []*corev1.Pod, nodes []*corev1.Node) string {
	var b strings.Builder
	for _, fw := range fws {
		fmt.Fprintf(&b, "\n  %s/%s:", fw.Namespace, fw.Name)
		for _, r := range fw.Spec.Egress {
			fmt.Fprintf(&b, " {%s %+v %v}", r.Type, r.To, r.Ports)
			if r.To.NodeSelector != nil {
				fmt.Fprintf(&b, "(nodes %v)", *r.To.NodeSelector)
			}
		}
	}
	for _, p := range pods {
		fmt.Fprintf(&b, "\n  pod %s on %s %v %s", p.Namespace, p.Spec.NodeName, p.Status.PodIPs, p.Status.Phase)
	}
	for _, n := range nodes {
		fmt.Fprintf(&b, "\n  node %s %v %v", n.Name, n.Labels, n.Status.Addresses)
	}
	return b.String()
}

// TestFirewallFlowCount checks the growth docs/egressfirewall.md states:
// local pod addresses plus, per rule, destinations × ports (plus, for a
// Deny with ports, destinations × its protocols), never pods × rules. 100
// pods under 1,000 CIDR rules cost 1,100 flows; 10 names of 3 addresses
// allowed on 2 ports each cost 60, denied on 3 ports of 2 protocols 150;
// and the exemptions and default come on top.
func TestFirewallFlowCount(t *testing.T) {
	const pods, rules = 100, 1000
	var ps []*corev1.Pod
	for i := range pods {
		ps = append(ps, pod("shop", "n1", nil, fmt.Sprintf("10.244.1.%d", i+1)))
	}
	var r []esv1.EgressFirewallRule
	for i := range rules {
		r = append(r, denyTo(cidrTo(fmt.Sprintf("198.%d.%d.0/24", i/256, i%256))))
	}
	shared := len(FirewallSharedFlows(firewallExemptions(n1Config), nil))
	count := func(rules []esv1.EgressFirewallRule, resolved map[string][]netip.Addr) int {
		return len(FirewallFlows(ComputeFirewall(n1Config, []*esv1.EgressFirewall{egressFirewall("shop", "default", rules...)}, ps, nil, resolved))) - shared
	}
	// A pod address costs a classifying flow and an inbound commit.
	if got, want := count(r, nil), 2*pods+rules; got != want {
		t.Errorf("%d pods, %d CIDR rules: %d flows, want %d (2 × pods + rules)", pods, rules, got, want)
	}
	r, resolved := nil, map[string][]netip.Addr{}
	for i := range 10 {
		name := fmt.Sprintf("h%d.example.com", i)
		resolved[name] = addrs(fmt.Sprintf("203.0.113.%d", i), fmt.Sprintf("203.0.114.%d", i), fmt.Sprintf("203.0.115.%d", i), "2001:db8::1")
		r = append(r, allowTo(dnsTo(name), esv1.EgressFirewallPort{Protocol: "TCP", Port: 443}, esv1.EgressFirewallPort{Protocol: "UDP", Port: 443}))
	}
	// The IPv6 address costs nothing: no pod of the namespace has one. A
	// namespace with a dnsName rule has two snoop flows per pod address
	// too (DNS replies over UDP and over TCP).
	if got, want := count(r, resolved), 4*pods+10*3*2; got != want {
		t.Errorf("10 names × 3 addresses × 2 ports: %d flows, want %d (4 × pods + names × addresses × ports)", got, want)
	}
	// The same names denied on three ports of two protocols: each address
	// has a flow per port and, for a Deny, one per protocol for the
	// fragments.
	for i := range r {
		r[i] = denyTo(r[i].To, esv1.EgressFirewallPort{Protocol: "TCP", Port: 443}, esv1.EgressFirewallPort{Protocol: "UDP", Port: 443},
			esv1.EgressFirewallPort{Protocol: "UDP", Port: 53})
	}
	if got, want := count(r, resolved), 4*pods+10*3*(3+2); got != want {
		t.Errorf("10 names × 3 addresses, Deny on 3 ports of 2 protocols: %d flows, want %d (4 × pods + names × addresses × (ports + protocols))", got, want)
	}
}

// TestFirewallProblemsAndIgnored: a CIDR of a family the cluster lacks and
// an unresolved name are reported (the name's rule matches nothing; the
// CIDR's is kept, harmless); rules the CRD refuses are skipped and
// reported; an object not named default, a namespace without local pods,
// and the pods of other nodes count for nothing.
func TestFirewallProblemsAndIgnored(t *testing.T) {
	v4only := NodeConfig{Name: "n1", ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	badSelector := esv1.LabelSelector{MatchExpressions: []esv1.LabelSelectorRequirement{{Key: "k", Operator: "Gt"}}}
	fw := ComputeFirewall(v4only, []*esv1.EgressFirewall{
		egressFirewall("shop", "default",
			denyTo(cidrTo("2001:db8::/32")),
			allowTo(dnsTo("late.example")),
			esv1.EgressFirewallRule{Type: "Reject", To: cidrTo("10.0.0.0/8")},
			denyTo(cidrTo("10.0.0.0/33")),
			denyTo(esv1.EgressFirewallDestination{CIDRSelector: "10.0.0.0/8", DNSName: "a.example"}),
			denyTo(esv1.EgressFirewallDestination{}),
			denyTo(esv1.EgressFirewallDestination{NodeSelector: &badSelector}),
			denyTo(cidrTo("10.0.0.0/8"), esv1.EgressFirewallPort{Protocol: "ICMP", Port: 1}),
			denyTo(cidrTo("10.0.0.0/8"), esv1.EgressFirewallPort{Protocol: "TCP", Port: 0}),
			denyTo(cidrTo("0.0.0.0/0"))),
		egressFirewall("shop", "custom", denyTo(cidrTo("0.0.0.0/0"))),
		egressFirewall("empty", "default", denyTo(cidrTo("0.0.0.0/0"))),
	}, []*corev1.Pod{
		pod("shop", "n1", nil, "10.244.1.5"),
		pod("shop", "n2", nil, "10.244.2.5"),
		pod("other", "n1", nil, "10.244.1.6"),
		pod("empty", "n2", nil, "10.244.2.6"),
	}, nil, map[string][]netip.Addr{})
	var got []string
	for _, p := range fw.Problems {
		if p.Key != "EgressFirewall/shop/default" {
			t.Errorf("problem of %q", p.Key)
		}
		got = append(got, string(p.Reason)+":"+p.Message[:len("rule 0")])
	}
	want := []string{"WrongFamily:rule 0", string(reasons.DNSNameUnresolved) + ":rule 1", "InvalidRule:rule 2", "InvalidRule:rule 3",
		"InvalidRule:rule 4", "InvalidRule:rule 5", "InvalidRule:rule 6", "InvalidRule:rule 7", "InvalidRule:rule 8"}
	if !slices.Equal(got, want) {
		t.Errorf("problems %v, want %v", got, want)
	}
	if len(fw.Namespaces) != 1 || fw.Namespaces[0].Key != "EgressFirewall/shop/default" {
		t.Fatalf("namespaces %+v", fw.Namespaces)
	}
	ns := fw.Namespaces[0]
	var kept []int
	for _, r := range ns.Rules {
		kept = append(kept, r.Index)
	}
	if !slices.Equal(kept, []int{0, 1, 9}) || len(ns.Rules[1].Destinations) != 0 || !slices.Equal(ns.Sources, addrs("10.244.1.5")) {
		t.Errorf("rules %+v, sources %v", ns.Rules, ns.Sources)
	}
	if !slices.Equal(fw.Exempt, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}) {
		t.Errorf("exempt %v, want the pod CIDR only (v4only has no service CIDR)", fw.Exempt)
	}
}

// TestFirewallNamespaceIDsStable: a namespace's ID, and so its flows, do
// not change when another namespace's EgressFirewall comes or goes, and
// IDs are unique and never 0.
func TestFirewallNamespaceIDsStable(t *testing.T) {
	shop := egressFirewall("shop", "default", allowTo(cidrTo("203.0.113.0/24")), denyTo(cidrTo("0.0.0.0/0")))
	pods := []*corev1.Pod{pod("shop", "n1", nil, "10.244.1.5"), pod("bank", "n1", nil, "10.244.1.7"), pod("cafe", "n1", nil, "10.244.1.8")}
	alone := ComputeFirewall(n1Config, []*esv1.EgressFirewall{shop}, pods, nil, nil)
	all := ComputeFirewall(n1Config, []*esv1.EgressFirewall{
		egressFirewall("bank", "default", denyTo(cidrTo("0.0.0.0/0"))), shop, egressFirewall("cafe", "default", denyTo(cidrTo("0.0.0.0/0")))}, pods, nil, nil)
	var buf FlowBuffer
	render := func(ns FirewallNamespace) []string {
		var out []string
		for _, f := range buf.AppendFirewallNamespace(nil, ns) {
			out = append(out, f.String())
		}
		return out
	}
	if len(all.Namespaces) != 3 || all.Namespaces[2].Key != "EgressFirewall/shop/default" {
		t.Fatalf("namespaces %+v", all.Namespaces)
	}
	if a, b := render(alone.Namespaces[0]), render(all.Namespaces[2]); !slices.Equal(a, b) {
		t.Errorf("shop's flows changed when others came:\n%s\nthen:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	seen := map[uint32]bool{}
	for _, ns := range all.Namespaces {
		if ns.ID == 0 || seen[ns.ID] {
			t.Errorf("namespace ID %#x is 0 or used twice", ns.ID)
		}
		seen[ns.ID] = true
	}
}

// TestTakeID: a colliding hash takes the next free value, 0 is skipped
// when kept, and the largest value wraps.
func TestTakeID(t *testing.T) {
	taken := map[uint32]bool{0: true}
	if got := []uint32{takeID(taken, 7), takeID(taken, 7), takeID(taken, 7), takeID(taken, 0)}; !slices.Equal(got, []uint32{7, 8, 9, 1}) {
		t.Errorf("IDs %v, want [7 8 9 1]", got)
	}
	if got := takeID(taken, 1<<32-1); got != 1<<32-1 {
		t.Errorf("max: %d", got)
	}
	if got := takeID(taken, 1<<32-1); got != 2 {
		t.Errorf("after max: %d, want 2 (0 and 1 taken)", got)
	}
}

// TestFirewallResolvers: the DNS replies to the node's own resolver pods
// (kube-system's k8s-app=kube-dns here) are snooped by shared flows while
// a namespace with local pods has a dnsName rule, and not otherwise; a
// resolver on another node, or a pod of the label in another namespace,
// is not one of this node's.
func TestFirewallResolvers(t *testing.T) {
	cfg := n1Config
	cfg.DNSResolvers = DNSResolverPods{Namespace: "kube-system", Selector: labels.SelectorFromSet(labels.Set{"k8s-app": "kube-dns"})}
	dnsLabels := map[string]string{"k8s-app": "kube-dns"}
	pods := []*corev1.Pod{
		pod("kube-system", "n1", dnsLabels, "10.244.1.53", "fd00:10:244:1::53"),
		pod("kube-system", "n2", dnsLabels, "10.244.2.53"),
		pod("elsewhere", "n1", dnsLabels, "10.244.1.54"),
		pod("shop", "n1", nil, "10.244.1.5"),
	}
	byName := ComputeFirewall(cfg, []*esv1.EgressFirewall{egressFirewall("shop", "default", denyTo(dnsTo("blocked.example.com")))}, pods, nil, nil)
	if got, want := byName.Resolvers, addrs("10.244.1.53", "fd00:10:244:1::53"); !slices.Equal(got, want) {
		t.Errorf("with a dnsName rule: resolvers %v, want %v", got, want)
	}
	cookie := fmt.Sprintf("%#x", Cookie(KindFirewallSnoop, ""))
	want := []string{
		"cookie=" + cookie + ", priority=210,udp,nw_dst=10.244.1.53,tp_src=53 actions=ct(commit,zone=61190),controller(pause),NORMAL",
		"cookie=" + cookie + ", priority=210,tcp,nw_dst=10.244.1.53,tp_src=53 actions=ct(commit,zone=61190),controller(pause),NORMAL",
		"cookie=" + cookie + ", priority=210,udp6,ipv6_dst=fd00:10:244:1::53,tp_src=53 actions=ct(commit,zone=61190),controller(pause),NORMAL",
		"cookie=" + cookie + ", priority=210,tcp6,ipv6_dst=fd00:10:244:1::53,tp_src=53 actions=ct(commit,zone=61190),controller(pause),NORMAL",
	}
	var got []string
	for _, f := range FirewallSharedFlows(byName.Exempt, byName.Resolvers) {
		if c, ok := DecodeCookie(f.Cookie); ok && c.Kind == KindFirewallSnoop {
			got = append(got, f.String())
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("resolver snoop flows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	byCIDR := ComputeFirewall(cfg, []*esv1.EgressFirewall{egressFirewall("shop", "default", denyTo(cidrTo("192.0.2.0/24")))}, pods, nil, nil)
	if byCIDR.Resolvers != nil {
		t.Errorf("without a dnsName rule: resolvers %v, want none", byCIDR.Resolvers)
	}
}
