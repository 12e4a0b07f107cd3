package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/reasons"
)

func externalRoute(name string, from map[string]string, static []esv1.StaticHop, dynamic ...esv1.DynamicHop) *esv1.AdminPolicyBasedExternalRoute {
	return &esv1.AdminPolicyBasedExternalRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: esv1.AdminPolicyBasedExternalRouteSpec{
			From:     esv1.ExternalNetworkSource{NamespaceSelector: esv1.LabelSelector{MatchLabels: from}},
			NextHops: esv1.ExternalNextHops{StaticHops: static, DynamicHops: dynamic},
		},
	}
}

func labelledNamespace(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

// gatewayPod is a Running pod in ns with labels; ready, host-networked
// with ips, or annotated with a network-status, as the test needs.
func gatewayPod(ns, name string, l map[string]string, ready, hostNetwork bool, networkStatus string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec:       corev1.PodSpec{HostNetwork: hostNetwork},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if networkStatus != "" {
		p.Annotations = map[string]string{NetworkStatusAnnotation: networkStatus}
	}
	return p
}

func hop(ip string, bfd bool) ExternalHop { return ExternalHop{IP: netip.MustParseAddr(ip), BFD: bfd} }

func TestExternalRouteHops(t *testing.T) {
	namespaces := []*corev1.Namespace{
		labelledNamespace("app-a", map[string]string{"egress": "gw"}),
		labelledNamespace("app-b", map[string]string{"egress": "gw", "team": "b"}),
		labelledNamespace("plain", nil),
		labelledNamespace("gateways", map[string]string{"role": "gateways"}),
	}
	gwSelector := esv1.LabelSelector{MatchLabels: map[string]string{"role": "gateways"}}
	const sriov = `[{"name":"ovn-kubernetes","ips":["10.244.1.5"],"default":true},{"name":"gateways/external","interface":"net1","ips":["198.51.100.20","2001:db8:1::20"]}]`
	pods := []*corev1.Pod{
		gatewayPod("gateways", "host-gw", map[string]string{"gw": "host"}, true, true, "", "172.18.0.11", "fd00:172:18::11"),
		gatewayPod("gateways", "host-gw-unready", map[string]string{"gw": "host"}, false, true, "", "172.18.0.12"),
		gatewayPod("gateways", "net-gw", map[string]string{"gw": "net"}, true, false, sriov),
		gatewayPod("gateways", "net-gw-unready", map[string]string{"gw": "net"}, false, false, `[{"name":"external","ips":["198.51.100.21"]}]`),
		gatewayPod("gateways", "pod-network-gw", map[string]string{"gw": "wrong"}, true, false, ""),
		gatewayPod("gateways", "no-annotation", map[string]string{"gw": "net"}, true, false, ""),
		gatewayPod("plain", "elsewhere", map[string]string{"gw": "host"}, true, true, "", "172.18.0.99"),
	}
	deleting := gatewayPod("gateways", "deleting", map[string]string{"gw": "host"}, true, true, "", "172.18.0.13")
	deleting.DeletionTimestamp = &metav1.Time{}
	pending := gatewayPod("gateways", "pending", map[string]string{"gw": "host"}, true, true, "", "172.18.0.14")
	pending.Status.Phase = corev1.PodPending
	pods = append(pods, deleting, pending)

	cases := []struct {
		name     string
		routes   []*esv1.AdminPolicyBasedExternalRoute
		want     map[string][]ExternalHop
		problems []reasons.Reason
	}{
		{
			name:   "static hops of both families, sorted IPv4 first",
			routes: []*esv1.AdminPolicyBasedExternalRoute{externalRoute("r", map[string]string{"team": "b"}, []esv1.StaticHop{{IP: "2001:db8::2"}, {IP: "192.0.2.9", BFDEnabled: true}, {IP: "192.0.2.1"}})},
			want:   map[string][]ExternalHop{"app-b": {hop("192.0.2.1", false), hop("192.0.2.9", true), hop("2001:db8::2", false)}},
		},
		{
			name: "two policies on one namespace merge, BFD if either asks",
			routes: []*esv1.AdminPolicyBasedExternalRoute{
				externalRoute("first", map[string]string{"egress": "gw"}, []esv1.StaticHop{{IP: "192.0.2.1"}, {IP: "192.0.2.2"}}),
				externalRoute("second", map[string]string{"team": "b"}, []esv1.StaticHop{{IP: "192.0.2.2", BFDEnabled: true}, {IP: "192.0.2.3"}}),
			},
			want: map[string][]ExternalHop{
				"app-a": {hop("192.0.2.1", false), hop("192.0.2.2", false)},
				"app-b": {hop("192.0.2.1", false), hop("192.0.2.2", true), hop("192.0.2.3", false)},
			},
		},
		{
			name: "dynamic host-networked gateways: Ready ones without BFD, every Running one with it",
			routes: []*esv1.AdminPolicyBasedExternalRoute{
				externalRoute("plain", map[string]string{"team": "b"}, nil, esv1.DynamicHop{NamespaceSelector: gwSelector, PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"gw": "host"}}}),
			},
			want: map[string][]ExternalHop{"app-b": {hop("172.18.0.11", false), hop("fd00:172:18::11", false)}},
		},
		{
			name: "with BFD an unready gateway is a hop; deleting and pending ones never are",
			routes: []*esv1.AdminPolicyBasedExternalRoute{
				externalRoute("bfd", map[string]string{"team": "b"}, nil, esv1.DynamicHop{NamespaceSelector: gwSelector, PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"gw": "host"}}, BFDEnabled: true}),
			},
			want: map[string][]ExternalHop{"app-b": {hop("172.18.0.11", true), hop("172.18.0.12", true), hop("fd00:172:18::11", true)}},
		},
		{
			name: "a network attachment by namespace/name and by name; a pod without the annotation is a problem",
			routes: []*esv1.AdminPolicyBasedExternalRoute{
				externalRoute("qualified", map[string]string{"team": "b"}, nil, esv1.DynamicHop{NamespaceSelector: gwSelector, PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"gw": "net"}}, NetworkAttachmentName: "gateways/external"}),
				externalRoute("short", map[string]string{"team": "b"}, nil, esv1.DynamicHop{NamespaceSelector: gwSelector, PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"gw": "net"}}, NetworkAttachmentName: "external", BFDEnabled: true}),
			},
			want: map[string][]ExternalHop{"app-b": {hop("198.51.100.20", true), hop("198.51.100.21", true), hop("2001:db8:1::20", true)}},
			// no-annotation, once for each policy.
			problems: []reasons.Reason{reasons.GatewayNetworkUnknown, reasons.GatewayNetworkUnknown},
		},
		{
			name: "a gateway on the pod network without a network attachment is a problem, and not a hop",
			routes: []*esv1.AdminPolicyBasedExternalRoute{
				externalRoute("r", map[string]string{"team": "b"}, []esv1.StaticHop{{IP: "192.0.2.1"}}, esv1.DynamicHop{NamespaceSelector: gwSelector, PodSelector: esv1.LabelSelector{MatchLabels: map[string]string{"gw": "wrong"}}}),
			},
			want:     map[string][]ExternalHop{"app-b": {hop("192.0.2.1", false)}},
			problems: []reasons.Reason{reasons.GatewayNotHostNetwork},
		},
		{
			name: "a selector that does not parse and an address that is not one are problems; the rest applies",
			routes: []*esv1.AdminPolicyBasedExternalRoute{
				func() *esv1.AdminPolicyBasedExternalRoute {
					r := externalRoute("broken-from", nil, []esv1.StaticHop{{IP: "192.0.2.1"}})
					r.Spec.From.NamespaceSelector.MatchExpressions = []esv1.LabelSelectorRequirement{{Key: "k", Operator: "Gt"}}
					return r
				}(),
				externalRoute("bad-address", map[string]string{"team": "b"}, []esv1.StaticHop{{IP: "192.0.2.0/24"}, {IP: "192.0.2.7"}}),
			},
			want:     map[string][]ExternalHop{"app-b": {hop("192.0.2.7", false)}},
			problems: []reasons.Reason{reasons.InvalidRule, reasons.InvalidSelector},
		},
		{
			name:   "a namespace no policy selects has no hops",
			routes: []*esv1.AdminPolicyBasedExternalRoute{externalRoute("r", map[string]string{"none": "x"}, []esv1.StaticHop{{IP: "192.0.2.1"}})},
			want:   map[string][]ExternalHop{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, problems := ComputeExternalRouteHops(c.routes, namespaces, pods)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("hops %v\nwant %v", got, c.want)
			}
			var gotReasons []reasons.Reason
			for _, p := range problems {
				gotReasons = append(gotReasons, p.Reason)
				if !strings.HasPrefix(p.Key, "AdminPolicyBasedExternalRoute/") || p.Message == "" {
					t.Errorf("problem %+v: want a key of the policy and a message", p)
				}
			}
			if !reflect.DeepEqual(gotReasons, c.problems) {
				t.Errorf("problems %+v, want reasons %v", problems, c.problems)
			}
		})
	}
}

// externalRouteNode is a node's view of its hops for the tests: the MACs
// it has resolved and the BFD sessions that are up.
func externalRouteNode(macs map[string]string, bfdUp ...string) ExternalRouteNode {
	return ExternalRouteNode{
		MAC: func(a netip.Addr) (net.HardwareAddr, bool) {
			mac, ok := macs[a.String()]
			if !ok {
				return nil, false
			}
			hw, err := net.ParseMAC(mac)
			return hw, err == nil
		},
		BFDUp: func(a netip.Addr) bool { return slices.Contains(bfdUp, a.String()) },
	}
}

// TestExternalRouteParts: the first policy by name that selects a
// namespace renders its local pods, through the hops of every policy
// that selects it, per family; a hop is used only once its MAC is known
// and, if BFD follows it, its session is up; a namespace with no live hop
// of a family, listed or not, drops that family (its group has no
// bucket). The flows and groups, as ovs-ofctl prints them.
func TestExternalRouteParts(t *testing.T) {
	const macA, macB, macV6, macWeb = "02:00:00:00:00:50", "02:00:00:00:00:51", "02:00:00:00:00:56", "02:00:00:00:00:60"
	routes := []*esv1.AdminPolicyBasedExternalRoute{
		externalRoute("b", map[string]string{"team": "billing"}, []esv1.StaticHop{{IP: "172.18.0.52"}}),
		externalRoute("a", map[string]string{"team": "billing"}, []esv1.StaticHop{{IP: "172.18.0.50", BFDEnabled: true}, {IP: "172.18.0.51"}, {IP: "2001:db8::50"}}),
		externalRoute("c", map[string]string{"team": "web"}, []esv1.StaticHop{{IP: "172.18.0.60", BFDEnabled: true}}),
	}
	namespaces := []*corev1.Namespace{
		labelledNamespace("shop", map[string]string{"team": "billing"}),
		labelledNamespace("web", map[string]string{"team": "web"}),
		labelledNamespace("other", nil),
	}
	pods := []*corev1.Pod{
		pod("shop", "n1", nil, "10.244.1.5", "fd00:10:244:1::5"),
		pod("web", "n1", nil, "10.244.1.6", "fd00:10:244:1::6"),
		pod("other", "n1", nil, "10.244.1.7"),
		pod("shop", "n2", nil, "10.244.2.5"),
	}
	// 172.18.0.52 is not resolved yet; 172.18.0.60's session is down.
	node := externalRouteNode(map[string]string{"172.18.0.50": macA, "172.18.0.51": macB, "2001:db8::50": macV6, "172.18.0.60": macWeb}, "172.18.0.50")
	computed := ComputeExternalRoutes(n1Config, routes, namespaces, pods, node)
	parts := computed.Parts
	if len(computed.Problems) > 0 {
		t.Errorf("problems: %v", computed.Problems)
	}
	var keys []string
	for _, p := range parts {
		keys = append(keys, p.Key)
	}
	if want := []string{"AdminPolicyBasedExternalRoute/a", "AdminPolicyBasedExternalRoute/c"}; !slices.Equal(keys, want) {
		t.Fatalf("parts %v, want %v (b's namespace is a's to render)", keys, want)
	}
	ports := Ports{Uplink: 1, BridgeMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}}
	render := func(p ExternalRoutePart) (flows, groups []string) {
		for _, fm := range p.AppendFlows(&FlowBuffer{}, nil, ports) {
			unowned := *fm
			unowned.Cookie = 0
			flows = append(flows, unowned.String())
		}
		for _, g := range p.AppendGroups(nil, ports) {
			groups = append(groups, g.String())
		}
		return flows, groups
	}

	a := parts[0]
	if len(a.Routes) != 2 {
		t.Fatalf("a's routes: %+v", a.Routes)
	}
	v4, v6 := a.Routes[0].Group, a.Routes[1].Group
	if v4&^groupIDsPerAPI != APIExternalRoute.GroupID(0) || v6&^groupIDsPerAPI != APIExternalRoute.GroupID(0) || v4 == v6 {
		t.Errorf("groups %#x, %#x: want two within the external routes' IDs", v4, v6)
	}
	zone := conntrack.ExternalRouteZone
	id4, id6 := v4&groupIDsPerAPI, v6&groupIDsPerAPI
	gw := func(id uint32, i int) uint32 { return uint32(i+1)<<24 | id }
	const labelA, labelB, labelV6 = "0xffffac120032", "0xffffac120033", "0x20010db8000000000000000000000050"
	wantFlows := []string{
		fmt.Sprintf("table=41, priority=180,ip,nw_src=10.244.1.5 actions=set_field:%#x->reg7,ct(table=49,zone=%d)", id4, zone),
		fmt.Sprintf("priority=220,ip,reg7=0/0x100000,in_port=1,dl_src=%s,nw_dst=10.244.1.5 actions=ct(commit,zone=%d,exec(set_field:%s->ct_label)),set_field:0x100000/0x100000->reg7,resubmit(,0)", macA, zone, labelA),
		fmt.Sprintf("priority=220,ip,reg7=0/0x100000,in_port=1,dl_src=%s,nw_dst=10.244.1.5 actions=ct(commit,zone=%d,exec(set_field:%s->ct_label)),set_field:0x100000/0x100000->reg7,resubmit(,0)", macB, zone, labelB),
		fmt.Sprintf("table=41, priority=180,ipv6,ipv6_src=fd00:10:244:1::5 actions=set_field:%#x->reg7,ct(table=49,zone=%d)", id6, zone),
		fmt.Sprintf("priority=220,ipv6,reg7=0/0x100000,in_port=1,dl_src=%s,ipv6_dst=fd00:10:244:1::5 actions=ct(commit,zone=%d,exec(set_field:%s->ct_label)),set_field:0x100000/0x100000->reg7,resubmit(,0)", macV6, zone, labelV6),
		fmt.Sprintf("table=49, priority=200,ct_state=+trk,ct_label=%s,ip,reg7=%#x actions=set_field:%s->eth_dst,output:1", labelA, id4, macA),
		fmt.Sprintf("table=49, priority=200,ip,reg7=%#x actions=ct(commit,zone=%d,exec(set_field:%s->ct_label)),set_field:%s->eth_dst,output:1", gw(id4, 0), zone, labelA, macA),
		fmt.Sprintf("table=49, priority=200,ct_state=+trk,ct_label=%s,ip,reg7=%#x actions=set_field:%s->eth_dst,output:1", labelB, id4, macB),
		fmt.Sprintf("table=49, priority=200,ip,reg7=%#x actions=ct(commit,zone=%d,exec(set_field:%s->ct_label)),set_field:%s->eth_dst,output:1", gw(id4, 1), zone, labelB, macB),
		fmt.Sprintf("table=49, priority=100,ip,reg7=%#x actions=group:%d", id4, v4),
		fmt.Sprintf("table=49, priority=200,ct_state=+trk,ct_label=%s,ipv6,reg7=%#x actions=set_field:%s->eth_dst,output:1", labelV6, id6, macV6),
		fmt.Sprintf("table=49, priority=200,ipv6,reg7=%#x actions=ct(commit,zone=%d,exec(set_field:%s->ct_label)),set_field:%s->eth_dst,output:1", gw(id6, 0), zone, labelV6, macV6),
		fmt.Sprintf("table=49, priority=100,ipv6,reg7=%#x actions=group:%d", id6, v6),
	}
	wantGroups := []string{
		fmt.Sprintf("add group_id=%d,type=select,selection_method=hash,fields(ip_src,ip_dst,ipv6_src,ipv6_dst,nw_proto,tcp_src,tcp_dst,udp_src,udp_dst,sctp_src,sctp_dst),bucket=bucket_id:0,weight:100,actions=set_field:%#x->reg7,resubmit(,49),bucket=bucket_id:1,weight:100,actions=set_field:%#x->reg7,resubmit(,49)", v4, gw(id4, 0), gw(id4, 1)),
		fmt.Sprintf("add group_id=%d,type=select,selection_method=hash,fields(ip_src,ip_dst,ipv6_src,ipv6_dst,nw_proto,tcp_src,tcp_dst,udp_src,udp_dst,sctp_src,sctp_dst),bucket=bucket_id:0,weight:100,actions=set_field:%#x->reg7,resubmit(,49)", v6, gw(id6, 0)),
	}
	flows, groups := render(a)
	if !slices.Equal(flows, wantFlows) {
		t.Errorf("a's flows:\n%s\nwant\n%s", strings.Join(flows, "\n"), strings.Join(wantFlows, "\n"))
	}
	if !slices.Equal(groups, wantGroups) {
		t.Errorf("a's groups:\n%s\nwant\n%s", strings.Join(groups, "\n"), strings.Join(wantGroups, "\n"))
	}

	// web's only IPv4 hop is down: its pod's IPv4 egress goes to a group
	// without buckets (dropped); it lists no IPv6 hop, so its IPv6 egress
	// goes to another such group: a selected pod never leaves another way.
	c := parts[1]
	if len(c.Routes) != 2 || c.Routes[0].Family != 0 || c.Routes[1].Family != 1 {
		t.Fatalf("c's routes: %+v", c.Routes)
	}
	web4, web6 := c.Routes[0].Group, c.Routes[1].Group
	flows, groups = render(c)
	wantFlows = []string{
		fmt.Sprintf("table=41, priority=180,ip,nw_src=10.244.1.6 actions=set_field:%#x->reg7,ct(table=49,zone=%d)", web4&groupIDsPerAPI, zone),
		fmt.Sprintf("table=41, priority=180,ipv6,ipv6_src=fd00:10:244:1::6 actions=set_field:%#x->reg7,ct(table=49,zone=%d)", web6&groupIDsPerAPI, zone),
		fmt.Sprintf("table=49, priority=100,ip,reg7=%#x actions=group:%d", web4&groupIDsPerAPI, web4),
		fmt.Sprintf("table=49, priority=100,ipv6,reg7=%#x actions=group:%d", web6&groupIDsPerAPI, web6),
	}
	wantGroups = []string{fmt.Sprintf("add group_id=%d,type=select,selection_method=hash,fields(ip_src,ip_dst,ipv6_src,ipv6_dst,nw_proto,tcp_src,tcp_dst,udp_src,udp_dst,sctp_src,sctp_dst)", web4), fmt.Sprintf("add group_id=%d,type=select,selection_method=hash,fields(ip_src,ip_dst,ipv6_src,ipv6_dst,nw_proto,tcp_src,tcp_dst,udp_src,udp_dst,sctp_src,sctp_dst)", web6)}
	if !slices.Equal(flows, wantFlows) || !slices.Equal(groups, wantGroups) {
		t.Errorf("c's flows:\n%s\ngroups %v", strings.Join(flows, "\n"), groups)
	}

	// The session comes up and 172.18.0.52 resolves: the groups keep their
	// IDs and gain the buckets.
	node = externalRouteNode(map[string]string{"172.18.0.50": macA, "172.18.0.51": macB, "172.18.0.52": "02:00:00:00:00:52", "2001:db8::50": macV6, "172.18.0.60": macWeb}, "172.18.0.50", "172.18.0.60")
	parts = ComputeExternalRoutes(n1Config, routes, namespaces, pods, node).Parts
	if got := parts[0].Routes[0]; got.Group != v4 || len(got.Gateways) != 3 {
		t.Errorf("a's IPv4 route after 172.18.0.52 resolved: %+v, want group %#x with 3 gateways", got, v4)
	}
	if got := parts[1].Routes[0]; got.Group != web4 || len(got.Gateways) != 1 {
		t.Errorf("c's route after its session came up: %+v, want group %#x with 1 gateway", got, web4)
	}
}
