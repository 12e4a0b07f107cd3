package dataplane

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/conntrack"
	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/heartbeat"
	"github.com/egressflow/egressflow/controller/reasons"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func egressService(ns, name string, mode esv1.SourceIPMode, network, host string) *esv1.EgressService {
	return &esv1.EgressService{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       esv1.EgressServiceSpec{SourceIPBy: mode, Network: network},
		Status:     esv1.EgressServiceStatus{Host: host},
	}
}

func lbService(ns, name string, ingress ...string) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, ip := range ingress {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

// endpointSlice: pairs of node, address.
func endpointSlice(pairs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
	for i := 0; i < len(pairs); i += 2 {
		node := pairs[i]
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{pairs[i+1]}, NodeName: &node})
	}
	return s
}

// pod is a running pod of namespace on node with labels and addresses.
func pod(namespace, node string, labels map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pod-" + strings.Join(ips, "-"), Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func node(name, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name},
	}}}
}

func agentLease(mac string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{heartbeat.AnnotationBridgeMAC: mac}}}
}

// publishingLease is an agent Lease with a bridge MAC and the host
// addresses annotation as written (comma-separated).
func publishingLease(mac, hostAddresses string) *coordinationv1.Lease {
	l := agentLease(mac)
	l.Annotations[heartbeat.AnnotationHostAddresses] = hostAddresses
	return l
}

// TestComputeExemptsHostAddresses: the host addresses that the agents of
// existing nodes publish are exempt beside the Node objects' addresses,
// in both families, and in Network mode's rules; a Lease whose node is
// gone exempts nothing.
func TestComputeExemptsHostAddresses(t *testing.T) {
	c := baseCluster()
	c.Leases["n2"] = publishingLease("02:00:00:00:00:02", "192.168.77.2,fd00:192:168:77::2,172.18.0.12")
	c.Leases["gone"] = publishingLease("02:00:00:00:00:09", "192.168.77.9")
	c.EgressServices = append(c.EgressServices, egressService("shop", "net", esv1.SourceIPByNetwork, "blue", esv1.HostAll))
	c.Services["shop/net"] = lbService("shop", "net", "192.0.2.40")
	c.EndpointSlices["shop/net"] = []*discoveryv1.EndpointSlice{endpointSlice("n1", "10.244.1.8")}
	for _, cfg := range []NodeConfig{n1Config, n2Config} {
		state := Compute(cfg, c, tables)
		want := []string{"10.96.0.0/16", "10.244.0.0/16", "172.18.0.11/32", "172.18.0.12/32", "192.168.77.2/32", "fd00:10:244::/48", "fd00:192:168:77::2/128"}
		if fmt.Sprint(state.Exempt) != fmt.Sprint(want) {
			t.Errorf("%s: exempt = %v, want %v", cfg.Name, state.Exempt, want)
		}
	}
	rules := fmt.Sprint(Compute(n1Config, c, tables).Rules)
	if !strings.Contains(rules, "to 192.168.77.2/32 goto") || strings.Contains(rules, "192.168.77.9") {
		t.Errorf("Network mode's rules do not keep exactly the published addresses on the main path: %s", rules)
	}

	// The planner, given the same nodes and Leases in either order.
	for _, leasesFirst := range []bool{false, true} {
		p := NewPlanner(n1Config, tables)
		if leasesFirst {
			p.SetLeases(c.Leases)
			p.SetNodes(c.Nodes)
		} else {
			p.SetNodes(c.Nodes)
			p.SetLeases(c.Leases)
		}
		if got, want := fmt.Sprint(p.Exempt()), fmt.Sprint(Compute(n1Config, c, tables).Exempt); got != want {
			t.Errorf("planner (Leases first %v): exempt = %s, want %s", leasesFirst, got, want)
		}
		// n2 gives up an address: it is no longer exempt.
		leases := maps.Clone(c.Leases)
		leases["n2"] = publishingLease("02:00:00:00:00:02", "fd00:192:168:77::2")
		p.SetLeases(leases)
		if slices.Contains(p.Exempt(), netip.MustParsePrefix("192.168.77.2/32")) {
			t.Errorf("planner (Leases first %v): an address n2 gave up is still exempt: %v", leasesFirst, p.Exempt())
		}
		// n2's Node deleted: none of its Lease's addresses is.
		p.SetNodes(c.Nodes[:1])
		if slices.Contains(p.Exempt(), netip.MustParsePrefix("fd00:192:168:77::2/128")) {
			t.Errorf("planner (Leases first %v): a deleted node's address is still exempt: %v", leasesFirst, p.Exempt())
		}
	}
}

var (
	n1Config = NodeConfig{
		Name:            "n1",
		ClusterPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")},
		ServiceCIDRs:    []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
	}
	n2Config = NodeConfig{Name: "n2", ClusterPodCIDRs: n1Config.ClusterPodCIDRs, ServiceCIDRs: n1Config.ServiceCIDRs}
)

func tables(network string) (int, error) {
	switch network {
	case "blue":
		return 100, nil
	case "7":
		return 7, nil
	}
	return 0, errors.New("no such table")
}

// cluster: web (dual-stack LB, host n1), endpoints on n1, n2 and a
// host-networked one; plus whatever extra objects a case adds.
func baseCluster() Cluster {
	return Cluster{
		EgressServices: []*esv1.EgressService{egressService("shop", "web", "", "", "n1")},
		Services:       map[string]*corev1.Service{"shop/web": lbService("shop", "web", "192.0.2.10", "2001:db8::10")},
		EndpointSlices: map[string][]*discoveryv1.EndpointSlice{"shop/web": {
			endpointSlice("n1", "10.244.1.5", "n2", "10.244.2.5", "n2", "172.18.0.12"),
			{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"fd00:10:244:2::5"}, NodeName: ptr("n2")}}},
		}},
		Nodes:  []*corev1.Node{node("n1", "172.18.0.11"), node("n2", "172.18.0.12")},
		Leases: map[string]*coordinationv1.Lease{"n1": agentLease("02:00:00:00:00:01"), "n2": agentLease("02:00:00:00:00:02")},
	}
}

func ptr(s string) *string { return &s }

func TestComputeHostAndSteer(t *testing.T) {
	c := baseCluster()
	host := Compute(n1Config, c, tables)
	want := []Service{{
		Key: "shop/web", Role: RoleHost,
		LoadBalancerIPs: addrs("192.0.2.10", "2001:db8::10"),
		// Every endpoint on the cluster network, wherever it runs; not the
		// host-networked 172.18.0.12.
		Endpoints:  addrs("10.244.1.5", "10.244.2.5", "fd00:10:244:2::5"),
		ReplyLBIPs: addrs("192.0.2.10", "2001:db8::10"),
	}}
	if fmt.Sprint(host.Services) != fmt.Sprint(want) || len(host.Problems) != 0 || len(host.Rules) != 0 {
		t.Fatalf("host n1:\n%+v\nwant\n%+v", host, want)
	}
	wantExempt := []string{"10.96.0.0/16", "10.244.0.0/16", "172.18.0.11/32", "172.18.0.12/32", "fd00:10:244::/48"}
	if fmt.Sprint(host.Exempt) != fmt.Sprint(wantExempt) {
		t.Errorf("exempt = %v, want %v", host.Exempt, wantExempt)
	}

	steer := Compute(n2Config, c, tables)
	if len(steer.Services) != 1 {
		t.Fatalf("n2: %+v", steer)
	}
	s := steer.Services[0]
	// All endpoints, n1's too: packets steered here by a node that still
	// thinks n2 is the host must be passed on, never let out.
	if s.Role != RoleSteer || s.HostMAC.String() != "02:00:00:00:00:01" ||
		!slices.Equal(s.Endpoints, addrs("10.244.1.5", "10.244.2.5", "fd00:10:244:2::5")) {
		t.Fatalf("n2 steers %+v", s)
	}
}

func TestComputeFamilies(t *testing.T) {
	c := baseCluster()
	c.Services["shop/web"] = lbService("shop", "web", "192.0.2.10", "192.0.2.99") // IPv4 only, two IPs
	host := Compute(n1Config, c, tables)
	s := host.Services[0]
	// The first IPv4 ingress IP; the IPv6 endpoint gets nothing.
	if !slices.Equal(s.LoadBalancerIPs, addrs("192.0.2.10")) || !slices.Equal(s.Endpoints, addrs("10.244.1.5", "10.244.2.5")) {
		t.Fatalf("IPv4-only service: %+v", s)
	}
}

func TestComputeNothingToDo(t *testing.T) {
	for name, mutate := range map[string]func(*Cluster){
		"no host":          func(c *Cluster) { c.EgressServices[0].Status.Host = "" },
		"service deleted":  func(c *Cluster) { delete(c.Services, "shop/web") },
		"not LoadBalancer": func(c *Cluster) { c.Services["shop/web"].Spec.Type = corev1.ServiceTypeClusterIP },
		"no endpoints":     func(c *Cluster) { delete(c.EndpointSlices, "shop/web") },
		"no ingress IP":    func(c *Cluster) { c.Services["shop/web"].Status.LoadBalancer.Ingress = nil },
	} {
		t.Run(name, func(t *testing.T) {
			c := baseCluster()
			mutate(&c)
			for _, cfg := range []NodeConfig{n1Config, n2Config} {
				if got := Compute(cfg, c, tables); len(got.Services)+len(got.Rules)+len(got.Problems) != 0 {
					t.Fatalf("%s: %+v", cfg.Name, got)
				}
			}
		})
	}
}

// TestComputeFenced: a fenced host node (its heartbeat not renewed) acts
// for the services it hosts as a steering node that knows no host: every
// endpoint caught and dropped, nothing SNATed, no reply un-NATed; the other
// node is unaffected.
func TestComputeFenced(t *testing.T) {
	c := baseCluster()
	fenced := n1Config
	fenced.Fenced = true
	got := Compute(fenced, c, tables)
	if len(got.Services) != 1 || got.Services[0].Role != RoleSteer || got.Services[0].HostMAC != nil ||
		len(got.Services[0].Endpoints) != 3 || len(got.Services[0].ReplyLBIPs) != 0 {
		t.Fatalf("fenced host: %+v; want every endpoint caught, no host MAC, no replies", got.Services)
	}
	if len(got.Problems) != 1 || got.Problems[0].Reason != reasons.Fenced {
		t.Fatalf("problems %+v, want Fenced", got.Problems)
	}
	for _, f := range Flows(n1Config, got, Ports{Uplink: 1}) {
		if kind := FlowKind(f.Cookie >> 40 & 0xff); kind == KindSNAT || kind == KindReplyCT || kind == KindSteer {
			t.Errorf("fenced host renders %s", f)
		}
	}
	if other := Compute(n2Config, c, tables); fmt.Sprint(other) != fmt.Sprint(Compute(n2Config, baseCluster(), tables)) || other.Services[0].HostMAC == nil {
		t.Errorf("the other node changed with n1's fence: %+v", other)
	}
}

func TestComputeSteerWithoutHostMAC(t *testing.T) {
	c := baseCluster()
	delete(c.Leases, "n1")
	got := Compute(n2Config, c, tables)
	if len(got.Services) != 1 || got.Services[0].HostMAC != nil || len(got.Services[0].Endpoints) != 3 {
		t.Fatalf("without the host's MAC the endpoints must still be caught (to drop): %+v", got.Services)
	}
	if len(got.Problems) != 1 || got.Problems[0].Reason != reasons.HostUnknown {
		t.Fatalf("problems %+v", got.Problems)
	}
}

func TestComputeNetworks(t *testing.T) {
	c := baseCluster()
	c.EgressServices = append(c.EgressServices,
		egressService("shop", "db", esv1.SourceIPByNetwork, "blue", esv1.HostAll),
		egressService("shop", "typo", esv1.SourceIPByNetwork, "bleu", esv1.HostAll))
	c.EgressServices[0].Spec.Network = "7" // web: LB mode with a table
	c.Services["shop/db"] = lbService("shop", "db")
	c.Services["shop/typo"] = lbService("shop", "typo")
	c.EndpointSlices["shop/db"] = []*discoveryv1.EndpointSlice{endpointSlice("n1", "10.244.1.20", "n2", "10.244.2.20")}
	c.EndpointSlices["shop/typo"] = []*discoveryv1.EndpointSlice{endpointSlice("n2", "10.244.2.30")}

	rule := func(src string, table int) Rule {
		return Rule{Source: netip.MustParseAddr(src), Table: table}
	}
	// Destinations inside the cluster skip the route rules, in each family
	// that has some: the pod and service CIDRs and the node IPs.
	exempt := func(prefix string) Rule {
		return Rule{Kind: ExemptRule, Destination: netip.MustParsePrefix(prefix)}
	}
	landing := func(zero string) Rule {
		return Rule{Kind: LandingRule, Destination: netip.MustParsePrefix(zero)}
	}
	exempt4 := []Rule{exempt("10.96.0.0/16"), exempt("10.244.0.0/16"), exempt("172.18.0.11/32"), exempt("172.18.0.12/32")}
	n1 := Compute(n1Config, c, tables)
	// web's host routes every SNATed endpoint through table 7; db routes
	// n1's own endpoint through blue (100).
	wantN1 := slices.Concat([]Rule{rule("10.244.1.5", 7), rule("10.244.1.20", 100), rule("10.244.2.5", 7), rule("fd00:10:244:2::5", 7)},
		exempt4, []Rule{exempt("fd00:10:244::/48"), landing("0.0.0.0/0"), landing("::/0")})
	if !slices.Equal(n1.Rules, wantN1) {
		t.Errorf("n1 rules %v, want %v", n1.Rules, wantN1)
	}
	n2 := Compute(n2Config, c, tables)
	// n2 steers web (no table there) and routes db's local endpoint; typo's
	// table is unknown: a problem, default routing.
	if want := slices.Concat([]Rule{rule("10.244.2.20", 100)}, exempt4, []Rule{landing("0.0.0.0/0")}); !slices.Equal(n2.Rules, want) {
		t.Errorf("n2 rules %v, want %v", n2.Rules, want)
	}
	if len(n2.Problems) != 1 || n2.Problems[0].Key != "shop/typo" || n2.Problems[0].Reason != reasons.UnknownNetwork {
		t.Errorf("n2 problems %+v", n2.Problems)
	}
	var roles []string
	for _, s := range n2.Services {
		roles = append(roles, s.Key+":"+string(s.Role))
	}
	if want := []string{"shop/db:Network", "shop/typo:Network", "shop/web:Steer"}; !slices.Equal(roles, want) {
		t.Errorf("n2 roles %v, want %v", roles, want)
	}
}

func TestComputeSharedEndpoint(t *testing.T) {
	c := baseCluster()
	// "a/first" sorts before "shop/web" and shares 10.244.2.5 with it.
	c.EgressServices = append(c.EgressServices, egressService("a", "first", "", "", "n2"))
	c.Services["a/first"] = lbService("a", "first", "192.0.2.50")
	c.EndpointSlices["a/first"] = []*discoveryv1.EndpointSlice{endpointSlice("n2", "10.244.2.5")}
	for _, cfg := range []NodeConfig{n1Config, n2Config} {
		got := Compute(cfg, c, tables)
		for _, s := range got.Services {
			if s.Key == "shop/web" && slices.Contains(s.Endpoints, netip.MustParseAddr("10.244.2.5")) {
				t.Errorf("%s: shop/web kept the endpoint a/first claimed: %+v", cfg.Name, s)
			}
		}
		if len(got.Problems) != 1 || got.Problems[0].Reason != reasons.EndpointClaimed || got.Problems[0].Key != "shop/web" {
			t.Errorf("%s: problems %+v", cfg.Name, got.Problems)
		}
	}
	n2 := Compute(n2Config, c, tables)
	if n2.Services[0].Key != "a/first" || n2.Services[0].Role != RoleHost {
		t.Errorf("n2 should host a/first: %+v", n2.Services)
	}
}

func TestComputeHostMismatch(t *testing.T) {
	c := baseCluster()
	c.EgressServices[0].Status.Host = esv1.HostAll // LoadBalancerIP with ALL
	got := Compute(n1Config, c, tables)
	if len(got.Services) != 0 || len(got.Problems) != 1 || got.Problems[0].Reason != reasons.HostMismatch {
		t.Fatalf("%+v", got)
	}
}

// TestTranslations: only services this node hosts translate, each endpoint
// to the LB IP of its own family.
func TestTranslations(t *testing.T) {
	a := netip.MustParseAddr
	state := State{Services: []Service{
		{Key: "ns/web", Role: RoleHost, LoadBalancerIPs: addrs("192.0.2.1", "2001:db8::1"), Endpoints: addrs("10.0.0.1", "fd00::1")},
		{Key: "ns/v4only", Role: RoleHost, LoadBalancerIPs: addrs("192.0.2.2"), Endpoints: addrs("10.0.0.2", "fd00::2")},
		{Key: "ns/steered", Role: RoleSteer, LoadBalancerIPs: addrs("192.0.2.3"), Endpoints: addrs("10.0.0.3")},
		{Key: "ns/network", Role: RoleNetwork, Endpoints: addrs("10.0.0.4")},
	}}
	want := conntrack.Translations{
		a("10.0.0.1"): a("192.0.2.1"),
		a("fd00::1"):  a("2001:db8::1"),
		a("10.0.0.2"): a("192.0.2.2"),
	}
	if got := state.Translations(); !maps.Equal(got, want) {
		t.Errorf("Translations = %v, want %v", got, want)
	}
}

// TestAdmittedPods: the pod guard admits this node's running pods, except
// an address that a service claiming endpoints selects but does not list
// yet; a pod of another node, a finished pod, an address outside the pod
// CIDRs and a pod selected only by a service without host are not held.
func TestAdmittedPods(t *testing.T) {
	c := baseCluster() // shop/web hosted on n1, endpoints 10.244.1.5, 10.244.2.5, fd00:10:244:2::5
	c.Services["shop/web"].Spec.Selector = map[string]string{"app": "web"}
	web := map[string]string{"app": "web"}
	c.EgressServices = append(c.EgressServices, egressService("shop", "idle", "", "", ""))
	c.Services["shop/idle"] = lbService("shop", "idle", "192.0.2.99")
	c.Services["shop/idle"].Spec.Selector = map[string]string{"app": "idle"}
	finished := pod("shop", "n1", nil, "10.244.1.4")
	finished.Status.Phase = corev1.PodSucceeded
	c.Pods = []*corev1.Pod{
		pod("shop", "n1", web, "10.244.1.5", "fd00:10:244:1::5"),          // listed; its IPv6 address is not
		pod("shop", "n1", web, "10.244.1.6"),                              // selected, not listed yet: held
		pod("other", "n1", web, "10.244.1.7"),                             // another namespace's app=web
		pod("shop", "n1", map[string]string{"app": "idle"}, "10.244.1.8"), // its service has no host
		pod("shop", "n1", nil, "10.244.1.9", "172.18.0.11"),               // host-networked address ignored
		pod("shop", "n2", nil, "10.244.2.9"),                              // another node's
		finished,
	}
	got := Compute(n1Config, c, tables).Admitted
	want := addrs("10.244.1.5", "10.244.1.7", "10.244.1.8", "10.244.1.9")
	if !slices.Equal(got, want) {
		t.Fatalf("admitted %v, want %v", got, want)
	}
	// An IPv4-only Service never lists its pods' IPv6 addresses.
	c.Services["shop/web"].Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	got = Compute(n1Config, c, tables).Admitted
	want = addrs("10.244.1.5", "10.244.1.7", "10.244.1.8", "10.244.1.9", "fd00:10:244:1::5")
	if !slices.Equal(got, want) {
		t.Fatalf("IPv4-only service: admitted %v, want %v", got, want)
	}
}
