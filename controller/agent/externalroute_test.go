package agent

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/bfd"
	"github.com/egressflow/egressflow/controller/neighbour"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

// withNeighbours gives the agent of n a neighbour resolver on n's bridge
// interface, in n's namespace, as the agent's main does on the node.
func withNeighbours(t *testing.T, n *topology.Node) func(*Config) {
	resolver, changed := startNeighbours(t, n)
	return func(cfg *Config) { cfg.Neighbours, cfg.HopsChanged = resolver, changed }
}

// withNeighboursAndBFD is withNeighbours with BFD sessions in n's
// namespace, counted in the agent's metrics and signalling on the same
// channel, as the agent's main does.
func withNeighboursAndBFD(t *testing.T, n *topology.Node) func(*Config) {
	resolver, changed := startNeighbours(t, n)
	var metrics atomic.Pointer[Metrics]
	sessions := listenBFD(t, n.Netns, func(c bfd.Change) {
		if m := metrics.Load(); m != nil {
			m.BFDChanged(c)
		}
		signal(changed)
	})
	return func(cfg *Config) {
		cfg.Neighbours, cfg.HopsChanged, cfg.BFD = resolver, changed, sessions
		metrics.Store(cfg.Metrics)
	}
}

func startNeighbours(t *testing.T, n *topology.Node) (*neighbour.Resolver, chan struct{}) {
	t.Helper()
	changed := make(chan struct{}, 1)
	var resolver *neighbour.Resolver
	err := topology.InNetns(n.Netns, func() error {
		var err error
		resolver, err = neighbour.Start(n.Bridge, 0, func() { signal(changed) })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(resolver.Close)
	return resolver, changed
}

// signal wakes the reader of c without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// routeEnv is a one-node env with two routers on the underlay (gw1 at
// .50, gw2 at .51) and a pod of namespace routed, which the route the
// tests create selects.
type routeEnv struct {
	*env
	node     *topology.Node
	gateways []*topology.Host
	routed   *topology.Pod
}

func newRouteEnv(t *testing.T) *routeEnv {
	e := newEnv(t, 1)
	r := &routeEnv{env: e, node: e.topo.Nodes[0], gateways: []*topology.Host{e.topo.AddGateway(t, "gw1", 50), e.topo.AddGateway(t, "gw2", 51)}}
	r.createNamespace(t, "routed", map[string]string{"egress": "gateways"})
	r.routed = r.node.AddPod(t, "routed")
	e.admin.CreatePod(t, "routed", r.routed, nil)
	return r
}

func (r *routeEnv) createNamespace(t *testing.T, name string, l map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	if _, err := r.admin.Kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createRoute creates the route "gateways", which selects namespace
// routed, with hops.
func (r *routeEnv) createRoute(t *testing.T, hops esv1.ExternalNextHops) *esv1.AdminPolicyBasedExternalRoute {
	t.Helper()
	route := &esv1.AdminPolicyBasedExternalRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "gateways"},
		Spec: esv1.AdminPolicyBasedExternalRouteSpec{
			From:     esv1.ExternalNetworkSource{NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"egress": "gateways"}}},
			NextHops: hops,
		},
	}
	created, err := r.admin.ES.K8sV1().AdminPolicyBasedExternalRoutes().Create(context.Background(), route, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// buckets checks that the node has the route's group with want buckets;
// its error shows the groups and the node's neighbour table, where the
// gateways' MACs come from.
func (r *routeEnv) buckets(t *testing.T, want int) func() error {
	return func() error {
		groups := r.node.Ofctl(t, "-O", "OpenFlow15", "dump-groups", r.node.Bridge)
		if got := strings.Count(groups, "bucket="); !strings.Contains(groups, "type=select") || got != want {
			return fmt.Errorf("want the route's group with %d buckets:\n%s\nneighbours of %s:\n%s", want, groups,
				r.node.Bridge, r.node.Exec(t, "ip", "neigh", "show", "dev", r.node.Bridge))
		}
		return nil
	}
}

// expectDropped checks that the routed pod's datagram to dst reaches
// nothing: the external host sees no packet of its addressed to it (its
// neighbour solicitations stay on the segment, as in the other tests).
// when tells what the test set up.
func (r *routeEnv) expectDropped(t *testing.T, dst netip.AddrPort, when string) {
	t.Helper()
	capture := r.topo.External.Capture(t)
	if src, err := r.routed.Dial("udp", dst); err == nil {
		t.Errorf("%s, the routed pod's datagram reached the external host from %v", when, src)
	}
	for _, p := range capture.Stop() {
		if (p.Src == r.routed.IP || p.Src == r.routed.IP6) && (p.Dst == r.topo.External.IP || p.Dst == r.topo.External.IP6) {
			t.Errorf("%s, the routed pod's packet left: %s", when, p.Line)
		}
	}
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
// IP. Its IPv6 egress, for which the route lists no hop, is dropped; a
// pod of another namespace leaves as before, not through a gateway. Once the route is
// deleted, the routed pod's egress leaves directly again; with a route
// whose only hop never answers, it is dropped.
func TestAgentExternalRouteSpreadsOverGateways(t *testing.T) {
	e := newRouteEnv(t)
	n, gateways, routed := e.node, e.gateways, e.routed
	gatewayOf := map[string]string{}
	for _, gw := range gateways {
		gatewayOf[gw.MAC(t)] = gw.Name
	}
	ctx := context.Background()
	bystander := e.addPod(n, "bystander")
	e.startAgent(n, withNeighbours(t, n)).waitHealthy(t)
	route := e.createRoute(t, esv1.ExternalNextHops{StaticHops: []esv1.StaticHop{{IP: gateways[0].IP.String()}, {IP: gateways[1].IP.String()}}})
	// Both gateways resolved and in the route's group.
	wait.Until(t, convergeTimeout, e.buckets(t, 2))

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
	e.expectDropped(t, e.server.Addr6, "with no IPv6 hop listed")
	if src, err := bystander.Dial("udp", e.server.Addr6); err != nil || src != bystander.IP6 {
		t.Fatalf("the bystander's IPv6 datagram: seen from %v, %v; want its own IP %v", src, err, bystander.IP6)
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
		case p.Src == routed.IP6:
			t.Errorf("the routed pod's IPv6 datagram left: %s", p.Line)
		case p.Src == bystander.IP, p.Src == bystander.IP6:
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
	e.createRoute(t, esv1.ExternalNextHops{StaticHops: []esv1.StaticHop{{IP: "172.18.0.99"}}})
	wait.Until(t, convergeTimeout, e.buckets(t, 0))
	e.expectDropped(t, e.server.Addr, "with no live hop")
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

// nsBFD is a BFD engine whose sessions live in a network namespace (a
// node's or a gateway's in the tests): its port is opened there, and each
// session's socket too.
type nsBFD struct {
	*bfd.Engine
	netns string
}

func listenBFD(t *testing.T, netns string, onChange func(bfd.Change)) nsBFD {
	t.Helper()
	var e *bfd.Engine
	err := topology.InNetns(netns, func() error {
		var err error
		e, err = bfd.Listen(bfd.Config{}, onChange)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return nsBFD{e, netns}
}

func (b nsBFD) Add(peer netip.Addr) error {
	return topology.InNetns(b.netns, func() error { return b.Engine.Add(peer) })
}

// bfdConns is how many connections TestAgentExternalRouteFollowsBFD
// opens before it cuts a gateway off: that none goes through it has a
// chance of 2^-20.
const bfdConns = 20

// TestAgentExternalRouteFollowsBFD: both next hops of a route ask for BFD,
// and each gateway runs a BFD engine with a session to the node. A hop is
// in the group only while its session is up: none before the gateways
// answer, both once they do; a gateway cut off from the segment leaves
// the group on that node with no API write (its session goes down in
// 300 ms at the defaults), and the pod's connections all go through the
// other, those it carried included; back on the segment, it returns.
func TestAgentExternalRouteFollowsBFD(t *testing.T) {
	e := newRouteEnv(t)
	n, gateways, routed := e.node, e.gateways, e.routed
	agent := e.startAgent(n, withNeighboursAndBFD(t, n))
	agent.waitHealthy(t)
	e.createRoute(t, esv1.ExternalNextHops{StaticHops: []esv1.StaticHop{
		{IP: gateways[0].IP.String(), BFDEnabled: true}, {IP: gateways[1].IP.String(), BFDEnabled: true}}})
	wait.Until(t, convergeTimeout, e.buckets(t, 0))
	e.expectDropped(t, e.server.Addr, "before any BFD session is up")

	for _, gw := range gateways {
		peer := listenBFD(t, gw.Netns, nil)
		if err := peer.Add(n.IP); err != nil {
			t.Fatal(err)
		}
	}
	wait.Until(t, convergeTimeout, e.buckets(t, 2))

	// Connections opened while both are up: some go through gw1.
	gw1MAC := gateways[0].MAC(t)
	capture := e.topo.External.Capture(t)
	var open []*topology.Conn
	for range bfdConns {
		conn, err := routed.Connect("udp", e.server.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if src, err := conn.Probe(); err != nil || src != routed.IP {
			t.Fatalf("the routed pod's datagram: seen from %v, %v", src, err)
		}
		open = append(open, conn)
	}
	throughGW1 := 0
	for _, p := range capture.Stop() {
		if p.Src == routed.IP && p.SrcMAC == gw1MAC {
			throughGW1++
		}
	}
	if throughGW1 == 0 {
		t.Fatalf("none of %d connections went through gw1", bfdConns)
	}

	cut := time.Now()
	gateways[0].Exec(t, "ip", "link", "set", "eth0", "down")
	wait.UntilEvery(t, convergeTimeout, 10*time.Millisecond, e.buckets(t, 1))
	t.Logf("gw1 cut off: out of the group %v later", time.Since(cut).Round(10*time.Millisecond))
	hops := samples(t, agent.metrics, "egressflow_agent_externalroute_hops")
	changes := samples(t, agent.metrics, "egressflow_agent_externalroute_hop_changes_total")
	if hops[`egressflow_agent_externalroute_hops{state="usable"}`] != 1 || hops[`egressflow_agent_externalroute_hops{state="bfd_down"}`] != 1 ||
		changes[`egressflow_agent_externalroute_hop_changes_total{to="usable"}`] != 2 || changes[`egressflow_agent_externalroute_hop_changes_total{to="unusable"}`] != 1 {
		t.Errorf("with gw1's session down, the hops' metrics: %v %v; want 1 usable, 1 bfd_down, 2 changes to usable and 1 to unusable", hops, changes)
	}
	if groups := n.Ofctl(t, "-O", "OpenFlow15", "dump-groups", n.Bridge); strings.Count(groups, "bucket=") != 1 {
		t.Fatalf("groups: %s", groups)
	}
	// What the heartbeat publishes and the per-policy metrics say which
	// hop is down, once the sync that took it out has ended.
	wantNotes := map[string][]string{"gateways": {"next hop " + gateways[0].IP.String() + ": BFD session down"}}
	wait.Until(t, convergeTimeout, func() error {
		if got := agent.ExternalRouteNotes(); !reflect.DeepEqual(got, wantNotes) {
			return fmt.Errorf("notes %q, want %q", got, wantNotes)
		}
		return nil
	})
	policyHops := samples(t, agent.metrics, "egressflow_agent_externalroute_policy_hops")
	bfdChanges := samples(t, agent.metrics, "egressflow_agent_bfd_session_changes_total")
	if policyHops[`egressflow_agent_externalroute_policy_hops{policy="gateways",state="usable"}`] != 1 ||
		policyHops[`egressflow_agent_externalroute_policy_hops{policy="gateways",state="unusable"}`] != 1 ||
		bfdChanges[`egressflow_agent_bfd_session_changes_total{to="up"}`] < 2 || bfdChanges[`egressflow_agent_bfd_session_changes_total{to="down"}`] < 1 {
		t.Errorf("with gw1's session down, the policy's hops %v and session changes %v; want 1 usable, 1 unusable, 2 or more up and 1 or more down", policyHops, bfdChanges)
	}
	// The connections that went through gw1 go on through gw2 (no
	// conntrack entry keeps them on a dead gateway), and new ones too.
	capture = e.topo.External.Capture(t)
	for _, conn := range open {
		if src, err := conn.Probe(); err != nil || src != routed.IP {
			t.Fatalf("with gw1 down, a connection opened before: seen from %v, %v", src, err)
		}
	}
	for range bfdConns {
		if src, err := routed.Dial("udp", e.server.Addr); err != nil || src != routed.IP {
			t.Fatalf("with gw1 down, the routed pod's datagram: seen from %v, %v", src, err)
		}
	}
	for _, p := range capture.Stop() {
		if p.Src == routed.IP && p.SrcMAC == gw1MAC {
			t.Errorf("with gw1's session down, a datagram went through it: %s", p.Line)
		}
	}

	gateways[0].Exec(t, "ip", "link", "set", "eth0", "up")
	wait.Until(t, convergeTimeout, e.buckets(t, 2))
	wait.Until(t, convergeTimeout, func() error {
		if got := agent.ExternalRouteNotes(); got == nil || len(got) != 0 {
			return fmt.Errorf("notes %q with both sessions up, want none", got)
		}
		return nil
	})
}

// gatewayPodObject is the Pod object of a host-networked gateway pod on
// another node, whose address is the host's: Running, Ready as asked.
func gatewayPodObject(name string, host *topology.Host, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gateways", Name: name, Labels: map[string]string{"app": "gateway"}},
		Spec: corev1.PodSpec{NodeName: "elsewhere", HostNetwork: true,
			Containers: []corev1.Container{{Name: "router", Image: "router"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: host.IP.String()}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// TestAgentExternalRouteDynamicGateways: a route's dynamic hop selects
// host-networked gateway pods in namespace gateways; the agent watches
// them and sends the routed pod's egress through the Ready ones. A
// gateway pod made NotReady leaves the group, one deleted too, and with
// none left the routed pod's egress is dropped, never sent another way.
func TestAgentExternalRouteDynamicGateways(t *testing.T) {
	e := newRouteEnv(t)
	n, gateways, routed := e.node, e.gateways, e.routed
	ctx := context.Background()
	e.createNamespace(t, "gateways", map[string]string{"role": "gateways"})
	pods := e.admin.Kube.CoreV1().Pods("gateways")
	for i, gw := range gateways {
		pod := gatewayPodObject(fmt.Sprintf("gw-%d", i+1), gw, true)
		created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = pod.Status
		if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.startAgent(n, withNeighbours(t, n)).waitHealthy(t)
	e.createRoute(t, esv1.ExternalNextHops{DynamicHops: []esv1.DynamicHop{{
		PodSelector:       esv1.LabelSelector{MatchLabels: map[string]string{"app": "gateway"}},
		NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"role": "gateways"}},
	}}})
	wait.Until(t, convergeTimeout, e.buckets(t, 2))
	if src, err := routed.Dial("udp", e.server.Addr); err != nil || src != routed.IP {
		t.Fatalf("the routed pod's datagram: seen from %v, %v", src, err)
	}

	// gw-2 NotReady: out of the group; the pod's egress through gw1 only.
	gw2, err := pods.Get(ctx, "gw-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw2.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := pods.UpdateStatus(ctx, gw2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, convergeTimeout, e.buckets(t, 1))
	capture := e.topo.External.Capture(t)
	for range bfdConns {
		if src, err := routed.Dial("udp", e.server.Addr); err != nil || src != routed.IP {
			t.Fatalf("with gw-2 NotReady, the routed pod's datagram: seen from %v, %v", src, err)
		}
	}
	gw1MAC := gateways[0].MAC(t)
	for _, p := range capture.Stop() {
		if p.Src == routed.IP && p.Dst == e.topo.External.IP && p.SrcMAC != gw1MAC {
			t.Errorf("with gw-2 NotReady, a datagram did not come through gw1: %s", p.Line)
		}
	}

	// gw-1 deleted: no gateway left, the pod's egress is dropped.
	if err := pods.Delete(ctx, "gw-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, convergeTimeout, e.buckets(t, 0))
	e.expectDropped(t, e.server.Addr, "with no gateway pod left")
}
