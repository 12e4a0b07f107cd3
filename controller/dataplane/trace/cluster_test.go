package trace_test

import (
	"errors"
	"net/netip"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/controller/heartbeat"
)

// The cluster the tests trace through: three nodes on one segment, the
// cluster and service CIDRs in both families, and four EgressServices in
// namespace shop that give node n1 every role:
//
//   - web (LB 192.0.2.10 and 2001:db8::10) hosted on n1, endpoints on n1
//     (both families) and n2; a pod of n1 that its selector picks but its
//     slices do not list yet is held;
//   - api (LB 192.0.2.20) hosted on n2, whose bridge MAC is known: n1
//     steers its endpoints to n2;
//   - db (LB 192.0.2.30 and 2001:db8::30) hosted on n3, which published no
//     MAC: n1 drops its endpoints' egress;
//   - net (sourceIPBy Network): its endpoint on n1 is admitted and routed
//     by ip rule, no flow.
//
// n1 also runs a pod no service selects (admitted), and a pod it has no
// Pod object of yet (held by the pod guard).
var (
	podCIDRs     = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}
	serviceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")}
	nodeIPs      = map[string][]string{
		"n1": {"172.18.0.11", "fd00:172:18::11"},
		"n2": {"172.18.0.12", "fd00:172:18::12"},
		"n3": {"172.18.0.13", "fd00:172:18::13"},
	}
	n1MAC = "02:00:00:00:00:01"
	n2MAC = "02:00:00:00:00:02"

	// Addresses of pods, by what the cluster makes of them on n1.
	webEndpoints = []string{"10.244.1.5", "fd00:10:244:1::5", "10.244.2.5"}
	apiEndpoints = []string{"10.244.1.6", "10.244.3.6"}
	dbEndpoints  = []string{"10.244.1.7", "fd00:10:244:1::7"}
	netEndpoints = []string{"10.244.1.8"}
	bystanders   = []string{"10.244.1.9", "fd00:10:244:1::9"}
	heldPod      = []string{"10.244.1.10", "fd00:10:244:1::10"}
	unknownPod   = []string{"10.244.1.11", "fd00:10:244:1::11"}
	otherPods    = []string{"10.244.2.9", "fd00:10:244:2::9"}
	lbIPs        = []string{"192.0.2.10", "2001:db8::10", "192.0.2.20", "192.0.2.30", "2001:db8::30", "192.0.2.40"}
)

func nodeConfig(name string) dataplane.NodeConfig {
	return dataplane.NodeConfig{Name: name, ClusterPodCIDRs: podCIDRs, ServiceCIDRs: serviceCIDRs}
}

// routingTables resolves spec.network "blue" for the Network-mode service.
func routingTables(network string) (int, error) {
	if network == "blue" {
		return 100, nil
	}
	return 0, errors.New("no such routing table")
}

// testCluster builds the cluster described above.
func testCluster() dataplane.Cluster {
	c := dataplane.Cluster{
		Services:       map[string]*corev1.Service{},
		EndpointSlices: map[string][]*discoveryv1.EndpointSlice{},
		Leases: map[string]*coordinationv1.Lease{
			"n1": agentLease(n1MAC), "n2": agentLease(n2MAC),
		},
	}
	for _, name := range []string{"n1", "n2", "n3"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, ip := range nodeIPs[name] {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		c.Nodes = append(c.Nodes, n)
	}
	service := func(name, mode, host, network string, lbs []string, endpoints map[string][]string) {
		c.EgressServices = append(c.EgressServices, &esv1.EgressService{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec:       esv1.EgressServiceSpec{SourceIPBy: esv1.SourceIPMode(mode), Network: network},
			Status:     esv1.EgressServiceStatus{Host: host},
		})
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}},
		}
		for _, lb := range lbs {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: lb})
		}
		c.Services["shop/"+name] = svc
		v4 := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
		v6 := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv6}
		for node, ips := range endpoints {
			for _, ip := range ips {
				s := v4
				if netip.MustParseAddr(ip).Is6() {
					s = v6
				}
				s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: &node})
			}
		}
		c.EndpointSlices["shop/"+name] = []*discoveryv1.EndpointSlice{v4, v6}
	}
	service("web", "", "n1", "", []string{"192.0.2.10", "2001:db8::10"},
		map[string][]string{"n1": {"10.244.1.5", "fd00:10:244:1::5"}, "n2": {"10.244.2.5"}})
	service("api", "", "n2", "", []string{"192.0.2.20"},
		map[string][]string{"n1": {"10.244.1.6"}, "n3": {"10.244.3.6"}})
	service("db", "", "n3", "", []string{"192.0.2.30", "2001:db8::30"},
		map[string][]string{"n1": {"10.244.1.7", "fd00:10:244:1::7"}})
	service("net", string(esv1.SourceIPByNetwork), esv1.HostAll, "blue", []string{"192.0.2.40"},
		map[string][]string{"n1": {"10.244.1.8"}})

	pod := func(node, app string, ips ...string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pod-" + ips[0]},
			Spec:       corev1.PodSpec{NodeName: node},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
		if app != "" {
			p.Labels = map[string]string{"app": app}
		}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		c.Pods = append(c.Pods, p)
	}
	pod("n1", "web", "10.244.1.5", "fd00:10:244:1::5")
	pod("n1", "api", "10.244.1.6")
	pod("n1", "db", "10.244.1.7", "fd00:10:244:1::7")
	pod("n1", "net", "10.244.1.8")
	pod("n1", "", bystanders...)
	pod("n1", "web", heldPod...) // selected by web, not listed yet: held
	pod("n2", "web", "10.244.2.5")
	pod("n2", "", otherPods...)
	return c
}

func agentLease(mac string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{heartbeat.AnnotationBridgeMAC: mac}}}
}
