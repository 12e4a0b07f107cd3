//go:build demo

package dockercluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/assign"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/test/topology"
	"github.com/egressflow/egressflow/test/wait"
)

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// TestDemo is `make demo`, egressflow's main job on one machine: a real
// Kubernetes cluster whose three nodes are Docker containers (kubelet,
// containerd and Open vSwitch each), egressflow installed with
// `kubectl apply -k deploy/`, a dual-stack EgressService whose pods'
// packets are shown leaving with the LB IP, and beside it a dual-stack
// EgressIP whose pods leave with its addresses, an
// AdminPolicyBasedExternalRoute over two external gateways one of which
// dies, an EgressRouter that redirects a client's datagrams to the external
// host, and the service's host node, which also serves the router, losing
// power (docker kill). It is a test only so that it can reuse the test
// harnesses and clean up everything they start; the demo build tag keeps it
// out of `go test ./...`. With DEMO_HOLD=0 it exits after the scenario;
// otherwise the cluster stays up, with the commands to look at it, until
// Ctrl-C.
func TestDemo(t *testing.T) {
	say("== Building what is missing (node image, Kubernetes binaries, images) and starting the cluster in Docker")
	start := time.Now()
	c := Start(t, Config{Nodes: 3})
	for _, n := range c.Nodes {
		say("   %s: container %s, node IP %s, %s on br-ex (uplink eth0 in br-ex); pods %s, %s", n.Name, n.Container, n.IP, n.IP6, n.PodCIDR4, n.PodCIDR6)
	}
	say("   control plane on this machine at %s; nodes Ready %v after start", c.API.URL, time.Since(start).Round(time.Second))
	say("== kubectl apply -k deploy/")
	c.Install()
	say("%s", indent(c.Kubectl("get", "pods", "-n", Namespace, "-o", "wide")))

	say("== Creating pods web-1..3 (one per node) and other, LoadBalancer Service %s/web (ingress %s, %s) and its EgressService", scenarioNamespace, lbIPs[0], lbIPs[1])
	s := newEgressScenario(t, c, esv1.EgressServiceSpec{})
	say("   status.host = %s; node label %s set; the announcer routes the LB IPs to it", s.host().Name, assign.LabelKey(scenarioNamespace, "web"))
	s.expectLBIPs()
	say("== What the external host sees")
	s.show(nil)
	say("== kubectl get egressservices -A")
	say("%s", indent(c.Kubectl("get", "egressservices", "-A")))
	s.showFlows()

	addrs := c.egressIPs()
	say("== EgressIP beside it: every node labelled %s; namespace billing (team=billing) with pods api-1..3 (app=web), one per node", egressAssignable)
	for _, n := range c.Nodes {
		c.labelEgressNode(t, n, true)
	}
	api := c.createEgressIPNamespace(t, "billing", s.targets)
	say("   EgressIP billing: egressIPs %s and %s (the cluster's segment), namespaceSelector team=billing, podSelector app=web", addrs[0], addrs[1])
	c.createEgressIP(t)
	for _, p := range api {
		c.ExpectSources(p, s.targets, []string{addrs[0].String(), addrs[1].String()})
	}
	say("%s", indent(c.Kubectl("get", "egressips", "billing", "-o", "custom-columns=NAME:.metadata.name,ADDRESSES:.spec.egressIPs,HELD:.status.items[*].egressIP,ON:.status.items[*].node,ASSIGNED:.status.conditions[0].message")))
	heldBefore := c.Kubectl("get", "egressips", "billing", "-o", "jsonpath={.status.items[*].node}")
	showEgressIP := func(gone *Node) {
		for _, p := range api {
			if gone != nil && p.Spec.NodeName == gone.Name {
				continue
			}
			got, _ := c.ProbeSources(p)
			for i, ip := range podIPs(p) {
				say("   %-6s %-6s %-22s -> external host saw %s", p.Name, p.Spec.NodeName, ip, got[s.targets[i]].Source)
			}
		}
		for _, a := range addrs {
			say("   the external host's neighbour entry for %s: %s", a, strings.TrimSpace(c.External.Exec(t, "ip", "neigh", "show", a.String())))
		}
	}
	showEgressIP(nil)

	showExternalRoute(t, c)
	router := showEgressRouter(t, c, s)

	// The kill follows at once: the capture holds the LB IPs' and the
	// router's traffic through the host before it, so that the outages
	// read from it have their start, and is stopped once both flow again.
	hostMAC := c.bridgeMAC(s.host())
	capture := c.captureFlowing(t, s.server, append(slices.Clone(lbIPs), router.addr)...)
	say("== %s loses power: docker kill %s", s.host().Name, s.host().Container)
	killed, _ := s.failHost(t, "kill")
	router.awaitMoved(t, killed)
	packets := capture.Stop()
	say("   status.host = %s; the external host got no LB-IP packet for %v (the last through %s to the first through %s)", s.host().Name,
		s.lbOutage(t, packets, hostMAC, c.bridgeMAC(s.host()), s.faultAt).Round(10*time.Millisecond), killed.Name, s.host().Name)
	for _, ep := range s.endpoints {
		if ep.Spec.NodeName != killed.Name {
			c.ExpectSources(ep, s.targets, []string{lbIPs[0].String(), lbIPs[1].String()})
		}
	}
	say("== What the external host sees (%s's pod is gone with it)", killed.Name)
	s.show(killed)
	say("%s", indent(c.Kubectl("get", "egressservices", "-A")))
	for _, p := range api {
		if p.Spec.NodeName != killed.Name {
			c.ExpectSources(p, s.targets, []string{addrs[0].String(), addrs[1].String()})
		}
	}
	moved := "it held none of the EgressIP's addresses: they stayed"
	if strings.Contains(heldBefore, killed.Name) {
		moved = "the address it held is on another egress node, which announced it"
	}
	say("== The EgressIP after %s's power loss (%s)", killed.Name, moved)
	say("%s", indent(c.Kubectl("get", "egressips", "billing", "-o", "custom-columns=NAME:.metadata.name,HELD:.status.items[*].egressIP,ON:.status.items[*].node")))
	showEgressIP(killed)
	router.showAfterKill(t, killed, packets)

	if os.Getenv("DEMO_HOLD") == "0" {
		say("== Done (DEMO_HOLD=0); cleaning up")
		return
	}
	say(`== The demo cluster stays up until you press Ctrl-C. To look at it:
   kubectl:              kubectl --kubeconfig %s get egressservices,egressips,apbexternalroutes,egressrouters,pods -A -o wide
   a node's flows:       docker exec %s ovs-ofctl -O OpenFlow15 dump-flows br-ex
   a pod's view:         kubectl --kubeconfig %s logs -n %s web-1 --tail 4
   the external host:    ip netns exec %s tcpdump -n -i eth0`,
		c.Kubeconfig, s.host().Container, c.Kubeconfig, scenarioNamespace, c.External.Netns)
	held, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-held.Done()
	say("== Cleaning up")
}

// showExternalRoute runs an AdminPolicyBasedExternalRoute over two
// external gateways that run FRR's bfdd, shows which gateway each routed
// pod's packets come through, then kills one gateway and shows how soon
// the nodes stop using it.
func showExternalRoute(t *testing.T, c *Cluster) {
	say("== AdminPolicyBasedExternalRoute: gateways gw1 and gw2 (containers on the segment, forwarding, FRR's bfdd at 100 ms x 3); namespace %s (egress=gateways) with a pod per node, namespace %s with one", routedNamespace, plainNamespace)
	r := newRouteScenario(c)
	say("   policy gateways: from namespaceSelector egress=gateways, static next hops %s, %s (gw1) and %s, %s (gw2), bfdEnabled", r.gateways[0].IP, r.gateways[0].IP6, r.gateways[1].IP, r.gateways[1].IP6)
	say("   every node's BFD sessions to both gateways are up (FRR: show bfd peers)")
	showRoutes := func() {
		l := r.watch.look(routeWindow)
		addrs := slices.SortedFunc(maps.Keys(r.watch.routedPods), func(a, b netip.Addr) int {
			return cmp.Or(strings.Compare(r.watch.routedPods[a], r.watch.routedPods[b]), a.Compare(b))
		})
		for _, addr := range addrs {
			var through []string
			for _, gw := range slices.Sorted(maps.Keys(l.via[addr])) {
				through = append(through, fmt.Sprintf("%s %d", gw, l.via[addr][gw]))
			}
			say("   %-9s %-26s -> the external host got it through %s", r.watch.routedPods[addr], addr, strings.Join(through, ", "))
		}
		say("   plain     (%s)            -> %d packets straight from its node, %d through a gateway", plainNamespace, l.plainDirect, l.plainViaGateway)
	}
	say("== What the external host sees (each datagram a new flow: the select group spreads them)")
	wait.Until(t, convergeTimeout, func() error {
		if got := r.watch.look(routeWindow).gatewaysUsed(false); len(got) != 2 {
			return fmt.Errorf("IPv4 through %v", got)
		}
		return nil
	})
	showRoutes()
	say("%s", indent(c.Kubectl("get", "apbexternalroute")))
	say("== %s's groups: docker exec %s ovs-ofctl -O OpenFlow15 dump-groups br-ex", c.Nodes[0].Name, c.Nodes[0].Container)
	say("%s", indent(c.Exec(c.Nodes[0], "ovs-ofctl", "-O", "OpenFlow15", "dump-groups", "br-ex")))

	say("== gw1 dies: docker kill %s", r.gateways[0].Container)
	took := r.killGateway(c, 0)
	say("   the last routed frame any node sent towards gw1 left %v after the kill (BFD's detection, then the groups without it)", took.Round(time.Millisecond))
	showRoutes()
	wait.Until(t, convergeTimeout, func() error {
		out := c.Kubectl("get", "apbexternalroute", "gateways", "-o", "jsonpath={.status.messages}")
		if !strings.Contains(out, "BFD session down") {
			return fmt.Errorf("status.messages %s", out)
		}
		return nil
	})
	say("== kubectl get apbexternalroute gateways -o jsonpath='{.status}'")
	say("%s", indent(c.Kubectl("get", "apbexternalroute", "gateways", "-o", "jsonpath={.status}")))
}

// demoRouter is the demo's EgressRouter: served by host, at addr,
// redirecting the datagrams of client (on clientNode) to dest.
type demoRouter struct {
	c                *Cluster
	s                *egressScenario
	name             string
	host, clientNode *Node
	hostMAC          string
	// holder is the node that serves the router once host was killed
	// (awaitMoved); "" while host serves it.
	holder string
	addr   netip.Addr
	dest   netip.AddrPort
	client *corev1.Pod
}

// showEgressRouter creates an EgressRouter served by the EgressService's
// host, which the demo kills next, and a client pod on another node that
// sends to it, and shows what the external host sees.
func showEgressRouter(t *testing.T, c *Cluster, s *egressScenario) *demoRouter {
	r := &demoRouter{c: c, s: s, host: s.host(), addr: netip.MustParseAddr(fmt.Sprintf("172.31.%d.70", c.subnet))}
	r.dest = netip.AddrPortFrom(c.External.IP, s.server.Addr.Port())
	say("== EgressRouter: namespace %s, reserved address %s, UDP port 80 redirected to the external host's %s (no pod: the holder node's OpenFlow serves it)", routerNamespace, r.addr, r.dest)
	c.CreateNamespace(routerNamespace)
	r.name = c.routerOn(t, routerNamespace, "redirect", r.host, udpRouter(r.addr, r.dest))
	r.clientNode = c.Nodes[slices.IndexFunc(c.Nodes, func(n *Node) bool { return n != r.host })]
	r.client = c.RunProbePod(routerNamespace, "client", r.clientNode, nil, r.target())
	c.ExpectSources(r.client, []string{r.target()}, []string{r.addr.String()})
	r.show(t)
	say("== kubectl get service,endpointslices -n %s (clients may use %s.%s.svc)", routerNamespace, r.name, routerNamespace)
	say("%s", indent(c.Kubectl("get", "service,endpointslices", "-n", routerNamespace)))
	say("== %s's redirect: docker exec %s ovs-ofctl -O OpenFlow15 dump-flows br-ex table=%d --no-stats", r.host.Name, r.host.Container, dataplane.TableRouterDNAT)
	say("%s", indent(c.Exec(r.host, "ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br-ex", fmt.Sprintf("table=%d", dataplane.TableRouterDNAT), "--no-stats")))
	r.hostMAC = c.bridgeMAC(r.host)
	return r
}

// target is where the client sends: the reserved address's port 80.
func (r *demoRouter) target() string { return netip.AddrPortFrom(r.addr, 80).String() }

// show prints the router, what the external host saw of the client's
// datagrams, and its neighbour entry for the reserved address.
func (r *demoRouter) show(t *testing.T) {
	say("%s", indent(r.c.Kubectl("get", "egressrouters", "-n", routerNamespace)))
	got, _ := r.c.ProbeSources(r.client)
	say("   client %-6s %-22s -> %s: the external host saw %s", r.clientNode.Name, podIPs(r.client)[0], r.target(), got[r.target()].Source)
	say("   the external host's neighbour entry for %s: %s", r.addr, strings.TrimSpace(r.c.External.Exec(t, "ip", "neigh", "show", r.addr.String())))
}

// awaitMoved waits, when killed was the router's host, until another node
// serves it and the external host got a datagram through it since.
func (r *demoRouter) awaitMoved(t *testing.T, killed *Node) {
	if killed == r.host {
		r.holder = r.c.awaitRouterAvailable(t, routerNamespace, r.name, r.host.Name)
		awaitSeen(t, r.s.server, r.addr, time.Now(), convergeTimeout)
	}
}

// showAfterKill shows the router after killed lost power (awaitMoved
// first), its outage read from packets, the external host's capture
// around the kill.
func (r *demoRouter) showAfterKill(t *testing.T, killed *Node, packets []topology.Packet) {
	if killed == r.host {
		gap := outageThrough(t, packets, r.addr, r.dest.Addr(), r.hostMAC, r.c.bridgeMAC(r.c.nodeNamed(r.holder)), r.s.faultAt)
		say("== The EgressRouter after %s's power loss: served by %s; the external host got no redirected datagram for %v (the last through %s to the first through %s)", r.host.Name, r.holder, gap.Round(10*time.Millisecond), r.host.Name, r.holder)
	} else { // the service's host moved before the kill
		say("== The EgressRouter after %s's power loss: still served by %s, which it did not hit", killed.Name, r.host.Name)
	}
	r.c.ExpectSources(r.client, []string{r.target()}, []string{r.addr.String()})
	r.show(t)
}

// show prints what the external host saw of each pod, per family; pods on
// gone are skipped.
func (s *egressScenario) show(gone *Node) {
	for _, p := range append(s.endpoints, s.bystander) {
		if gone != nil && p.Spec.NodeName == gone.Name {
			continue
		}
		got, err := s.c.ProbeSources(p)
		if err != nil {
			say("   %-6s %s: %v", p.Name, p.Spec.NodeName, err)
			continue
		}
		role := "endpoint"
		if p == s.bystander {
			role = "no endpoint"
		}
		for i, ip := range podIPs(p) {
			say("   %-6s %-6s %-11s %-22s -> external host saw %s", p.Name, p.Spec.NodeName, role, ip, got[s.targets[i]].Source)
		}
	}
}

// showFlows prints the host's egressflow flows as an operator reads them.
func (s *egressScenario) showFlows() {
	filter := fmt.Sprintf("cookie=%#x/%#x", dataplane.CookiePrefix, dataplane.CookiePrefixMask)
	say("== %s's flows: docker exec %s ovs-ofctl -O OpenFlow15 dump-flows br-ex %s --no-stats", s.host().Name, s.host().Container, filter)
	say("%s", indent(s.c.Exec(s.host(), "ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br-ex", filter, "--no-stats")))
}

func indent(text string) string {
	return "   " + strings.ReplaceAll(strings.TrimRight(text, "\n"), "\n", "\n   ")
}
