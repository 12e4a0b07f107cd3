package dataplane

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
	"github.com/egressflow/egressflow/openflow"
)

// What a selected dual-stack pod of n1 does under each EGRESSIP_UNHELD
// choice, when its EgressIP holds an address of one family (IPv6, on n2)
// and none of the other (IPv4): the held family always leaves with its
// egress IP (steered to n2); the unheld one is dropped (never admitted) by
// default, and admitted as the node's other pods are under node-ip. The
// option covers only "no address of the family is held": a held address
// whose holder's MAC is unknown, or that this node holds while fenced,
// still drops the pod's egress.
func TestEgressIPUnheld(t *testing.T) {
	const pod4, pod6 = "10.244.1.5", "fd00:10:244:1::5"
	const holderMAC = "02:00:00:00:00:02"
	cluster := func(holder string, leases map[string]*coordinationv1.Lease) Cluster {
		eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "billing"},
			Spec: esv1.EgressIPSpec{EgressIPs: []string{"172.18.0.100", "2001:db8::100"},
				NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}}},
			Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: "2001:db8::100", Node: holder}}}}
		return Cluster{
			Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "billing"}}}},
			Pods:       []*corev1.Pod{pod("shop", "n1", nil, pod4, pod6)},
			EgressIPs:  []*esv1.EgressIP{eip},
			Leases:     leases,
		}
	}
	withMAC := map[string]*coordinationv1.Lease{"n1": agentLease("02:00:00:00:00:01"), "n2": agentLease(holderMAC)}
	withoutMAC := map[string]*coordinationv1.Lease{"n1": agentLease("02:00:00:00:00:01"), "n2": agentLease("")}
	noLB := func(netip.Addr) (string, bool) { return "", false }

	for _, tc := range []struct {
		name     string
		unheld   EgressIPUnheld
		fenced   bool
		holder   string
		leases   map[string]*coordinationv1.Lease
		admitted []netip.Addr // by the pod guard, as any pod of the node
		steered  []netip.Addr // to the holder, with its egress IP
		problem  reasons.Reason
	}{
		{name: "default: the unheld family is dropped", unheld: "", holder: "n2", leases: withMAC,
			steered: addrs(pod6)},
		{name: "drop, written out", unheld: EgressIPUnheldDrop, holder: "n2", leases: withMAC,
			steered: addrs(pod6)},
		{name: "node-ip: the unheld family leaves through the node", unheld: EgressIPUnheldNodeIP, holder: "n2", leases: withMAC,
			admitted: addrs(pod4), steered: addrs(pod6)},
		{name: "node-ip, the holder's MAC unknown: still dropped", unheld: EgressIPUnheldNodeIP, holder: "n2", leases: withoutMAC,
			admitted: addrs(pod4), problem: reasons.HostUnknown},
		{name: "node-ip, this node holds the address while fenced: still dropped", unheld: EgressIPUnheldNodeIP, fenced: true, holder: "n1", leases: withMAC,
			admitted: addrs(pod4)},
		{name: "node-ip, nothing held: both families leave through the node", unheld: EgressIPUnheldNodeIP, holder: "", leases: withMAC,
			admitted: addrs(pod4, pod6)},
		{name: "drop, nothing held: nothing leaves", unheld: EgressIPUnheldDrop, holder: "", leases: withMAC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := n1Config
			node.EgressIPUnheld, node.Fenced = tc.unheld, tc.fenced
			c := cluster(tc.holder, tc.leases)
			if got := AdmittedPods(node, c); !slices.Equal(got, tc.admitted) {
				t.Errorf("admitted %v, want %v", got, tc.admitted)
			}
			eips := ComputeEgressIP(node, c, noLB)
			var steered []netip.Addr
			for _, part := range eips.Parts {
				for _, p := range part.Pods {
					if p.HolderMAC.String() != holderMAC || p.Via != netip.MustParseAddr("2001:db8::100") {
						t.Errorf("pod %s leaves via %s steered to %s, want 2001:db8::100 through %s", p.Pod, p.Via, p.HolderMAC, holderMAC)
					}
					steered = append(steered, p.Pod)
				}
			}
			if !slices.Equal(steered, tc.steered) {
				t.Errorf("steered %v, want %v", steered, tc.steered)
			}
			// Every address of the pod is either admitted or selected
			// (left with an egress IP, or dropped): never both, never neither.
			for _, a := range addrs(pod4, pod6) {
				if slices.Contains(tc.admitted, a) == slices.Contains(eips.Selected, a) {
					t.Errorf("%s: admitted %v, selected %v", a, tc.admitted, eips.Selected)
				}
			}
			var problems []reasons.Reason
			for _, p := range eips.Problems {
				problems = append(problems, p.Reason)
			}
			if want := []reasons.Reason{tc.problem}; tc.problem == "" && len(problems) > 0 || tc.problem != "" && !slices.Equal(problems, want) {
				t.Errorf("problems %v, want %v", eips.Problems, tc.problem)
			}
			// The Planner, kept from its indexes, agrees.
			p := NewPlanner(node, tables)
			p.SetLeases(tc.leases)
			p.SetNamespaces(c.Namespaces)
			p.SetLocalPods(c.Pods)
			p.SetClusterPods(c.Pods)
			p.SetEgressIPs(c.EgressIPs)
			if got, want := normalize(p.State()), normalize(Compute(node, c, tables)); got != want {
				t.Errorf("planner and Compute differ:\n%s\n%s", got, want)
			}
		})
	}
}

// TestEgressIPSpread: an EgressIP holding two IPv4 addresses (on n2 and
// n3) and one IPv6 address (on n2). n1's pod spreads its IPv4 connections
// over both (a select group with a bucket per address, each recording its
// address in the connection's ct_label, and a sticky flow per address
// that keeps a connection on the address it was given), and leaves with
// the one IPv6 address as before (steered to n2); each holder SNATs every
// selected pod of its address's family to its own address, wherever the
// pod runs; a holder whose bridge MAC is unknown is left out of the group
// (a problem), and with one address left the pod is pinned to it. A local
// pod's pinned connections are recorded with their address too, so that
// they keep it when a second address comes.
func TestEgressIPSpread(t *testing.T) {
	const a4, b4, a6 = "172.18.0.100", "172.18.0.101", "2001:db8::100"
	const mac2, mac3 = "02:00:00:00:00:02", "02:00:00:00:00:03"
	eip := &esv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "billing"},
		Spec: esv1.EgressIPSpec{EgressIPs: []string{a4, b4, a6},
			NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}}},
		Status: esv1.EgressIPStatus{Items: []esv1.EgressIPStatusItem{{EgressIP: a4, Node: "n2"}, {EgressIP: b4, Node: "n3"}, {EgressIP: a6, Node: "n2"}}}}
	local, remote := pod("shop", "n1", nil, "10.244.1.5", "fd00:10:244:1::5"), pod("shop", "n3", nil, "10.244.3.5")
	cluster := Cluster{
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "billing"}}}},
		Pods:       []*corev1.Pod{local, remote},
		EgressIPs:  []*esv1.EgressIP{eip},
		Leases:     map[string]*coordinationv1.Lease{"n1": agentLease("02:00:00:00:00:01"), "n2": agentLease(mac2), "n3": agentLease(mac3)},
	}
	noLB := func(netip.Addr) (string, bool) { return "", false }
	ports := Ports{Uplink: 1, BridgeMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}}

	n1 := ComputeEgressIP(n1Config, cluster, noLB)
	if len(n1.Parts) != 1 || len(n1.Problems) > 0 {
		t.Fatalf("n1: parts %+v, problems %v", n1.Parts, n1.Problems)
	}
	part := n1.Parts[0]
	group := part.Spread[0].Group
	if group&^groupIDsPerAPI != APIEgressIP.GroupID(0) || part.Spread[1].Group != 0 {
		t.Errorf("groups %#x (IPv4), %#x (IPv6): want one within EgressIP's IDs for IPv4 only", group, part.Spread[1].Group)
	}
	var flows []string
	for _, fm := range part.AppendFlows(&FlowBuffer{}, nil, ports) {
		unowned := *fm
		unowned.Cookie = 0
		flows = append(flows, unowned.String())
	}
	id := group & groupIDsPerAPI
	hop := func(i int) uint32 { return uint32(i+1)<<24 | id }
	want := []string{
		fmt.Sprintf("table=41, priority=190,ip,nw_src=10.244.1.5 actions=set_field:%#x->reg6,ct(table=48,zone=%d)", id, conntrack.EgressIPZone),
		fmt.Sprintf("table=41, priority=190,ipv6,ipv6_src=fd00:10:244:1::5 actions=ct(commit,zone=%d,exec(set_field:0x20010db8000000000000000000000100->ct_label)),set_field:%s->eth_dst,output:1", conntrack.EgressIPZone, mac2),
		fmt.Sprintf("table=48, priority=200,ct_state=+trk,ct_label=0xffffac120064,ip,reg6=%#x actions=set_field:%s->eth_dst,output:1", id, mac2),
		fmt.Sprintf("table=48, priority=200,ip,reg6=%#x actions=ct(commit,zone=%d,exec(set_field:0xffffac120064->ct_label)),set_field:%s->eth_dst,output:1", hop(0), conntrack.EgressIPZone, mac2),
		fmt.Sprintf("table=48, priority=200,ct_state=+trk,ct_label=0xffffac120065,ip,reg6=%#x actions=set_field:%s->eth_dst,output:1", id, mac3),
		fmt.Sprintf("table=48, priority=200,ip,reg6=%#x actions=ct(commit,zone=%d,exec(set_field:0xffffac120065->ct_label)),set_field:%s->eth_dst,output:1", hop(1), conntrack.EgressIPZone, mac3),
		fmt.Sprintf("table=48, priority=100,ip,reg6=%#x actions=group:%d", id, group),
	}
	if !slices.Equal(flows, want) {
		t.Errorf("n1's flows:\n%s\nwant\n%s", strings.Join(flows, "\n"), strings.Join(want, "\n"))
	}
	groups := part.AppendGroups(nil, ports)
	if len(groups) != 1 {
		t.Fatalf("n1's groups: %v", groups)
	}
	wantGroup := fmt.Sprintf("add group_id=%d,type=select,"+
		"selection_method=hash,fields(ip_src,ip_dst,ipv6_src,ipv6_dst,nw_proto,tcp_src,tcp_dst,udp_src,udp_dst,sctp_src,sctp_dst),"+
		"bucket=bucket_id:0,weight:100,actions=set_field:%#x->reg6,resubmit(,48),"+
		"bucket=bucket_id:1,weight:100,actions=set_field:%#x->reg6,resubmit(,48)", group, hop(0), hop(1))
	if got := groups[0].String(); got != wantGroup {
		t.Errorf("n1's group:\n%s\nwant\n%s", got, wantGroup)
	}
	if !bytes.Equal(groups[0].Properties, openflow.HashSelection(openflow.FieldIPv4Src, openflow.FieldIPv4Dst, openflow.FieldIPv6Src, openflow.FieldIPv6Dst,
		openflow.FieldIPProto, openflow.FieldTCPSrc, openflow.FieldTCPDst, openflow.FieldUDPSrc, openflow.FieldUDPDst, openflow.FieldSCTPSrc, openflow.FieldSCTPDst)) {
		t.Errorf("n1's group does not pick by the connection's addresses, protocol and ports: %x", groups[0].Properties)
	}

	// Each holder SNATs every pod of another node selected in its
	// address's family to it; n3's own pod spreads over n2's address
	// (steered) and n3's (SNATed here, a translation n3 makes).
	for node, wantSNAT := range map[string][]string{"n2": {"10.244.1.5", "10.244.3.5"}, "n3": {"10.244.1.5"}} {
		cfg := n1Config
		cfg.Name = node
		got := ComputeEgressIP(cfg, cluster, noLB).Parts[0]
		via := netip.MustParseAddr(map[string]string{"n2": a4, "n3": b4}[node])
		var snat []string
		for _, p := range got.Pods {
			if !p.Spread && p.HolderMAC == nil && p.Via == via {
				snat = append(snat, p.Pod.String())
			}
		}
		if !slices.Equal(snat, wantSNAT) {
			t.Errorf("%s SNATs %v to %s, want %v", node, snat, via, wantSNAT)
		}
		translations := conntrack.Translations{}
		got.AddTranslations(translations)
		want := conntrack.Translations{netip.MustParseAddr("10.244.1.5"): via, netip.MustParseAddr("10.244.3.5"): via}
		if node == "n2" {
			want[netip.MustParseAddr("fd00:10:244:1::5")] = netip.MustParseAddr(a6)
		}
		if !maps.Equal(translations, want) {
			t.Errorf("%s translates %v, want %v", node, translations, want)
		}
	}
	n3 := n1Config
	n3.Name = "n3"
	if got := ComputeEgressIP(n3, cluster, noLB).Parts[0]; !slices.ContainsFunc(got.Pods, func(p EgressIPPod) bool { return p.Spread && p.Pod.String() == "10.244.3.5" }) ||
		len(got.Spread[0].Hops) != 2 || got.Spread[0].Hops[0].HolderMAC.String() != mac2 || got.Spread[0].Hops[1].HolderMAC != nil {
		t.Errorf("n3's part %+v: want its pod spread over %s (steered to n2) and %s (here)", got, a4, b4)
	}

	// n3's MAC unknown: n1 pins its pod to n2's address and says why.
	cluster.Leases["n3"] = agentLease("")
	n1 = ComputeEgressIP(n1Config, cluster, noLB)
	if p := n1.Parts[0]; p.Spread[0].Group != 0 || p.Pods[0].Spread || p.Pods[0].Via != netip.MustParseAddr(a4) {
		t.Errorf("n3's MAC unknown: n1's part %+v, want its IPv4 pinned to %s", p, a4)
	}
	if len(n1.Problems) != 1 || n1.Problems[0].Reason != reasons.HostUnknown || !strings.Contains(n1.Problems[0].Message, "leave with the other held addresses") {
		t.Errorf("n3's MAC unknown: problems %v", n1.Problems)
	}
}
