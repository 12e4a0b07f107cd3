package dataplane

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
