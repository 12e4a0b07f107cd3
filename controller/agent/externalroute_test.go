package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/neighbour"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// withNeighbours gives the agent of n a neighbour resolver on n's bridge
// interface, in n's namespace, as the agent's main does on the node.
func withNeighbours(t *testing.T, n *topology.Node) func(*Config) {
	changed := make(chan struct{}, 1)
	var resolver *neighbour.Resolver
	err := topology.InNetns(n.Netns, func() error {
		var err error
		resolver, err = neighbour.Start(n.Bridge, 0, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(resolver.Close)
	return func(cfg *Config) { cfg.Neighbours, cfg.NeighboursChanged = resolver, changed }
}

// externalRouteConns is how many UDP connections the routed pod opens:
// enough that two gateways, each picked by a hash of the 5-tuple, both
// take some (each connection misses one with probability 1/2).
const externalRouteConns = 24

// TestAgentExternalRouteSpreadsOverGateways: an AdminPolicyBasedExternalRoute
// selects namespace routed, with two static next hops, routers on the
// underlay. The agent resolves their MACs and sends the routed pod's
// egress through them: each UDP connection through one gateway, always the
// same, and the connections spread over both; the packets keep the pod's
// IP. IPv6, for which the route lists no hop, and a pod of another
// namespace leave as before, not through a gateway. Once the route is
// deleted, the routed pod's egress leaves directly again; with a route
// whose only hop never answers, it is dropped.
func TestAgentExternalRouteSpreadsOverGateways(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	gateways := []*topology.Host{e.topo.AddGateway(t, "gw1", 50), e.topo.AddGateway(t, "gw2", 51)}
	gatewayOf := map[string]string{}
	for _, gw := range gateways {
		gatewayOf[gw.MAC(t)] = gw.Name
	}
	ctx := context.Background()
	if _, err := e.admin.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "routed",
		Labels: map[string]string{"egress": "gateways"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	routed := n.AddPod(t, "routed")
	e.admin.CreatePod(t, "routed", routed, nil)
	bystander := e.addPod(n, "bystander")
	e.startAgent(n, withNeighbours(t, n)).waitHealthy(t)

	route := &esv1.AdminPolicyBasedExternalRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "gateways"},
		Spec: esv1.AdminPolicyBasedExternalRouteSpec{
			From:     esv1.ExternalNetworkSource{NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"egress": "gateways"}}},
			NextHops: esv1.ExternalNextHops{StaticHops: []esv1.StaticHop{{IP: gateways[0].IP.String()}, {IP: gateways[1].IP.String()}}},
		},
	}
	if _, err := e.admin.ES.K8sV1().AdminPolicyBasedExternalRoutes().Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Both gateways resolved and in the route's group.
	wait.Until(t, convergeTimeout, func() error {
		groups := n.Ofctl(t, "-O", "OpenFlow15", "dump-groups", n.Bridge)
		if strings.Count(groups, "bucket=") != 2 {
			return fmt.Errorf("the route's group has not both gateways yet:\n%s", groups)
		}
		return nil
	})

	capture := e.topo.External.Capture(t)
	ports := map[uint16]bool{}
	for range externalRouteConns {
		conn, err := routed.Connect("udp", e.server.Addr)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if src, err := conn.Probe(); err != nil || src != routed.IP {
				t.Fatalf("the routed pod's datagram: seen from %v, %v; want its own IP %v", src, err, routed.IP)
			}
		}
		ports[netip.MustParseAddrPort(conn.LocalAddr().String()).Port()] = true
		conn.Close()
	}
	for _, p := range []*topology.Pod{routed, bystander} {
		if src, err := p.Dial("udp", e.server.Addr6); err != nil || src != p.IP6 {
			t.Fatalf("%s's IPv6 datagram: seen from %v, %v; want its own IP %v", p.Name, src, err, p.IP6)
		}
	}
	if src, err := bystander.Dial("udp", e.server.Addr); err != nil || src != bystander.IP {
		t.Fatalf("the bystander's datagram: seen from %v, %v; want its own IP %v", src, err, bystander.IP)
	}

	// Which gateway forwarded each connection's datagrams: the frame's
	// source at the external host.
	via := map[uint16]map[string]bool{}
	used := map[string]int{}
	bridgeMAC := n.BridgeMAC(t)
	for _, p := range capture.Stop() {
		if p.Dst != e.topo.External.IP && p.Dst != e.topo.External.IP6 {
			continue
		}
		gw, throughGateway := gatewayOf[p.SrcMAC]
		switch {
		case p.Src == routed.IP:
			port := sourcePort(t, p)
			if !throughGateway {
				t.Errorf("the routed pod's datagram from port %d came from %s, not a gateway: %s", port, p.SrcMAC, p.Line)
				continue
			}
			if via[port] == nil {
				via[port] = map[string]bool{}
			}
			via[port][gw] = true
			used[gw]++
		case p.Src == routed.IP6, p.Src == bystander.IP, p.Src == bystander.IP6:
			if throughGateway || p.SrcMAC != bridgeMAC {
				t.Errorf("%s left through %s (%s), not directly from the node (%s)", p.Src, p.SrcMAC, gw, bridgeMAC)
			}
		}
	}
	for port := range ports {
		if len(via[port]) != 1 {
			t.Errorf("connection from port %d went through %v; want exactly one gateway", port, via[port])
		}
	}
	if len(used) != 2 {
		t.Errorf("the connections went through %v; want both gateways", used)
	}
	t.Logf("%d connections: %v datagrams through each gateway", len(ports), used)

	// The route gone, the pod leaves directly again.
	if err := e.admin.ES.K8sV1().AdminPolicyBasedExternalRoutes().Delete(ctx, route.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, convergeTimeout, func() error {
		if groups := n.Ofctl(t, "-O", "OpenFlow15", "dump-groups", n.Bridge); strings.Contains(groups, "group_id") {
			return fmt.Errorf("the route's group is still there:\n%s", groups)
		}
		return nil
	})
	capture = e.topo.External.Capture(t)
	if src, err := routed.Dial("udp", e.server.Addr); err != nil || src != routed.IP {
		t.Fatalf("after the route went, the routed pod's datagram: seen from %v, %v", src, err)
	}
	for _, p := range capture.Stop() {
		if p.Src == routed.IP && p.Dst == e.topo.External.IP && p.SrcMAC != bridgeMAC {
			t.Errorf("after the route went, the routed pod's datagram still came from %s: %s", p.SrcMAC, p.Line)
		}
	}

	// A route whose only hop never answers: the pod's IPv4 egress is
	// dropped, never sent another way.
	route.Spec.NextHops.StaticHops = []esv1.StaticHop{{IP: "172.18.0.99"}}
	route.ResourceVersion = ""
	if _, err := e.admin.ES.K8sV1().AdminPolicyBasedExternalRoutes().Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, convergeTimeout, func() error {
		if groups := n.Ofctl(t, "-O", "OpenFlow15", "dump-groups", n.Bridge); !strings.Contains(groups, "type=select") || strings.Contains(groups, "bucket=") {
			return fmt.Errorf("want the route's group without buckets:\n%s", groups)
		}
		return nil
	})
	capture = e.topo.External.Capture(t)
	if src, err := routed.Dial("udp", e.server.Addr); err == nil {
		t.Errorf("with no live hop, the routed pod's datagram reached the external host from %v", src)
	}
	for _, p := range capture.Stop() {
		if p.Src == routed.IP {
			t.Errorf("with no live hop, the routed pod's packet left: %s", p.Line)
		}
	}
}

// sourcePort reads a UDP packet's source port from tcpdump's line
// ("IP 10.244.1.2.35786 > 172.18.0.100.45063: UDP, length 6").
func sourcePort(t *testing.T, p topology.Packet) uint16 {
	t.Helper()
	fields := strings.Fields(p.Line)
	for i, f := range fields {
		if f == ">" && i > 0 {
			src := fields[i-1]
			dot := strings.LastIndexByte(src, '.')
			var port uint16
			if _, err := fmt.Sscan(src[dot+1:], &port); err == nil {
				return port
			}
		}
	}
	t.Fatalf("no source port in %q", p.Line)
	return 0
}
