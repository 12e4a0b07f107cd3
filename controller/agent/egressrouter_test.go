package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressflow/egressflow/conntrack"
	nov1 "github.com/egressflow/egressflow/controller/apis/networkoperator/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/test/topology"
)

// Reserved addresses of the router tests: on the underlay segment, where
// the nodes' host stacks and the external host resolve them.
var (
	routerIP4 = netip.MustParseAddr("172.18.0.60")
	routerIP6 = netip.MustParseAddr("fd00:172:18::60")
)

// setRouterHolder writes status.holder of the router shop/name, as the
// cluster component would.
func (e *env) setRouterHolder(name, holder string) {
	e.t.Helper()
	ctx := context.Background()
	routers := e.admin.ES.NetworkOperatorV1().EgressRouters("shop")
	r, err := routers.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	r.Status.Holder = holder
	if r.Status.Conditions == nil { // required, and dropped at creation
		r.Status.Conditions = []nov1.EgressRouterStatusCondition{}
	}
	if _, err := routers.UpdateStatus(ctx, r, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// createRouter creates the router shop/billing, which reserves routerIP4
// and routerIP6 with their segment's prefix lengths, through gateways
// (one per family, in that order) if any, and redirects as redirect says.
func (e *env) createRouter(redirect nov1.RedirectConfig, gateways ...netip.Addr) {
	e.t.Helper()
	router := &nov1.EgressRouter{
		ObjectMeta: metav1.ObjectMeta{Name: "billing", Namespace: "shop"},
		Spec: nov1.EgressRouterSpec{
			Mode:             nov1.EgressRouterModeRedirect,
			NetworkInterface: nov1.EgressRouterInterface{Macvlan: nov1.MacvlanConfig{Mode: nov1.MacvlanModeBridge}},
			Addresses: []nov1.EgressRouterAddress{
				{IP: netip.PrefixFrom(routerIP4, topology.UnderlayPrefix.Bits()).String()},
				{IP: netip.PrefixFrom(routerIP6, topology.UnderlayPrefix6.Bits()).String()},
			},
			Redirect: &redirect,
		},
	}
	for i, gw := range gateways {
		router.Spec.Addresses[i].Gateway = gw.String()
	}
	if _, err := e.admin.ES.NetworkOperatorV1().EgressRouters("shop").Create(context.Background(), router, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// routerConnections counts the connections n's switch tracks that a
// router redirected through addr: in conntrack.RouterZone those to addr,
// in conntrack.RouterSNATZone those translated to it.
func routerConnections(t testing.TB, n *topology.Node, addr netip.Addr) (redirected, translated int) {
	count := func(zone uint16, field string) int {
		c := 0
		for _, line := range strings.Split(n.Appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", zone)), "\n") {
			if strings.Contains(line, field) {
				c++
			}
		}
		return c
	}
	// orig=(src=CLIENT,dst=ADDR,...) in the one, reply=(src=DEST,dst=ADDR,...)
	// in the other.
	field := ",dst=" + addr.String() + ","
	return count(conntrack.RouterZone, field), count(conntrack.RouterSNATZone, field)
}

// routerFlows counts the EgressRouter flows on n's bridge.
func routerFlows(t testing.TB, n *topology.Node) int {
	out := n.Ofctl(t, "dump-flows", "br-ex", fmt.Sprintf("cookie=%#x/%#x", dataplane.APIEgressRouter.Cookie(), dataplane.APICookieMask))
	count := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "cookie=") {
			count++
		}
	}
	return count
}

// TestAgentEgressRouter moves real packets through an EgressRouter served
// by the agents of a two-node topology, its holder written as the cluster
// component would. A pod on the holder and a pod on the other node open
// TCP and UDP connections, and SCTP associations (their INIT and INIT
// ACK, over raw sockets), to the reserved addresses of both families: on
// each rule's port they reach the rule's destination at its target port,
// with the reserved address as their source, and the answer comes back;
// on another IPv4 port they reach the fallback at the same port; on
// another IPv6 port (no fallback of that family) they are refused, a TCP
// connection with a reset and a UDP one with ICMP port unreachable.
// The external host learns the reserved addresses from the holder's
// answers, and moves to the new holder when the router moves, before it
// sends anything (the takeover's announcement); the redirect resumes
// there, and the old holder keeps no router flow and no connection it
// redirected. No pod address ever reaches the external host. Deleting the
// router removes every flow.
func TestAgentEgressRouter(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	local, remote := e.addPod(n1, "local"), e.addPod(n2, "remote")
	for _, n := range e.topo.Nodes {
		e.startAgent(n).waitHealthy(t)
		// The destinations are off the segment, through the external host,
		// as through a segment's router.
		for i, dst := range internet {
			n.Exec(t, "ip", "route", "add", netip.PrefixFrom(dst, dst.BitLen()).String(), "via", []netip.Addr{e.topo.External.IP, e.topo.External.IP6}[i].String())
		}
	}
	ctx := context.Background()
	serverPort := e.server.Addr.Port()
	fallback := e.topo.External.IP
	e.createRouter(nov1.RedirectConfig{
		RedirectRules: []nov1.L4RedirectRule{
			{DestinationIP: internet[0].String(), Port: 80, Protocol: nov1.ProtocolTypeTCP, TargetPort: int32(serverPort)},
			{DestinationIP: internet[0].String(), Port: 80, Protocol: nov1.ProtocolTypeUDP, TargetPort: int32(serverPort)},
			{DestinationIP: internet[1].String(), Port: 81, Protocol: nov1.ProtocolTypeTCP, TargetPort: int32(serverPort)},
			{DestinationIP: internet[1].String(), Port: 81, Protocol: nov1.ProtocolTypeUDP, TargetPort: int32(serverPort)},
			{DestinationIP: e.topo.External.IP.String(), Port: 82, Protocol: nov1.ProtocolTypeSCTP},
			{DestinationIP: e.topo.External.IP6.String(), Port: 83, Protocol: nov1.ProtocolTypeSCTP},
		},
		FallbackIP: fallback.String(),
	})
	start := time.Now()
	e.setRouterHolder("billing", n1.Name)

	// Each case: a connection to the router, and where it must arrive
	// (invalid: nowhere).
	type redirect struct {
		to, want netip.AddrPort
	}
	cases := []redirect{
		{netip.AddrPortFrom(routerIP4, 80), netip.AddrPortFrom(internet[0], serverPort)},
		{netip.AddrPortFrom(routerIP6, 81), netip.AddrPortFrom(internet[1], serverPort)},
		{netip.AddrPortFrom(routerIP4, serverPort), netip.AddrPortFrom(fallback, serverPort)},
		{netip.AddrPortFrom(routerIP6, serverPort), netip.AddrPort{}},
	}
	// SCTP: an INIT to each reserved address's SCTP rule arrives at the
	// rule's destination and port from the reserved address, and the
	// INIT ACK comes back from the reserved address and the rule's port.
	// The userspace datapath these tests run tracks SCTP by address only
	// (docs/egressrouter.md, "SCTP"): the rules keep their port, and one
	// client associates, the pod on n1 (the holder's own client, then
	// another node's once the router moves).
	sctp := e.topo.External.ServeSCTP(t)
	checkSCTP := func(step string) {
		t.Helper()
		for _, c := range []redirect{
			{netip.AddrPortFrom(routerIP4, 82), netip.AddrPortFrom(e.topo.External.IP, 82)},
			{netip.AddrPortFrom(routerIP6, 83), netip.AddrPortFrom(e.topo.External.IP6, 83)},
		} {
			eventually(t, fmt.Sprintf("%s: sctp %s from %s", step, c.to, local.Name), func() error {
				srcPort, err := local.SCTPInit(c.to)
				if err != nil {
					return err
				}
				for _, in := range sctp.Inits() {
					if in.At == c.want && in.From.Addr() == c.to.Addr() {
						return nil
					}
				}
				return fmt.Errorf("the INIT ACK came (from port %d) but no INIT arrived at %s from %s: %v", srcPort, c.want, c.to.Addr(), sctp.Inits())
			})
		}
	}
	check := func(step string) {
		t.Helper()
		for _, p := range []*topology.Pod{local, remote} {
			for _, network := range []string{"tcp", "udp"} {
				for _, c := range cases {
					reserved := c.to.Addr()
					if !c.want.IsValid() {
						// No rule and no fallback of the family: refused at
						// once (a reset, an ICMP port unreachable), as the
						// API says, not left to time out.
						eventually(t, fmt.Sprintf("%s: %s %s from %s refused", step, network, c.to, p.Name), func() error {
							src, err := p.Dial(network, c.to)
							switch {
							case err == nil:
								return fmt.Errorf("reached a server (as %s); the router has no IPv6 fallback", src)
							case !errors.Is(err, syscall.ECONNREFUSED):
								return fmt.Errorf("not refused: %w", err)
							}
							return nil
						})
						continue
					}
					eventually(t, fmt.Sprintf("%s: %s %s from %s", step, network, c.to, p.Name), func() error {
						since := time.Now()
						src, err := p.Dial(network, c.to)
						if err != nil {
							return err
						}
						if src != reserved {
							return fmt.Errorf("the server saw source %s, want the reserved address %s", src, reserved)
						}
						if seen := e.server.SeenAt(reserved, since); !slices.Contains(seen, c.want) {
							return fmt.Errorf("arrived at %v, want %s", seen, c.want)
						}
						return nil
					})
				}
			}
		}
	}
	check("held by n1")
	checkSCTP("held by n1")
	for _, addr := range []netip.Addr{routerIP4, routerIP6} {
		if got, want := e.externalNeighbour(addr), n1.BridgeMAC(t); got != want {
			t.Errorf("external host's neighbour entry for %s: %q, want n1's bridge MAC %s", addr, got, want)
		}
	}
	if routerFlows(t, n2) != 0 {
		t.Errorf("n2 holds router flows while n1 serves the router:\n%s", n2.Ofctl(t, "dump-flows", "br-ex"))
	}
	for _, addr := range []netip.Addr{routerIP4, routerIP6} {
		if redirected, translated := routerConnections(t, n1, addr); redirected == 0 || translated == 0 {
			t.Errorf("n1 tracks %d connections to %s and %d translated to it, want some of each", redirected, addr, translated)
		}
	}

	// The router moves to n2: the external host learns it from n2's
	// announcement, before any connection asks.
	e.setRouterHolder("billing", n2.Name)
	for _, addr := range []netip.Addr{routerIP4, routerIP6} {
		eventually(t, "the external host's neighbour entry for "+addr.String()+" moves to n2", func() error {
			if got, want := e.externalNeighbour(addr), n2.BridgeMAC(t); got != want {
				return fmt.Errorf("%q, want %s", got, want)
			}
			return nil
		})
	}
	eventually(t, "n1 keeps no router flow", func() error {
		if n := routerFlows(t, n1); n != 0 {
			return fmt.Errorf("%d flows", n)
		}
		return nil
	})
	// Nor any connection it redirected: should the router come back, none
	// would carry an old rule's translation.
	for _, addr := range []netip.Addr{routerIP4, routerIP6} {
		if redirected, translated := routerConnections(t, n1, addr); redirected+translated != 0 {
			t.Errorf("n1 still tracks %d connections to %s and %d translated to it after the router left:\n%s\n%s", redirected, addr, translated,
				n1.Appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", conntrack.RouterZone)), n1.Appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", conntrack.RouterSNATZone)))
		}
	}
	check("held by n2")
	checkSCTP("held by n2")

	for _, src := range e.server.Sources() {
		for _, p := range []*topology.Pod{local, remote} {
			if slices.Contains(p.Addrs(), src) {
				t.Errorf("the external host saw pod %s's address %s", p.Name, src)
			}
		}
	}
	if got := e.server.SeenAt(fallback, start); len(got) != 0 {
		t.Errorf("the fallback's own address was a source: %v", got)
	}

	if err := e.admin.ES.NetworkOperatorV1().EgressRouters("shop").Delete(ctx, "billing", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no router flow once the router is gone", func() error {
		for _, n := range e.topo.Nodes {
			if c := routerFlows(t, n); c != 0 {
				return fmt.Errorf("%s holds %d", n.Name, c)
			}
		}
		return nil
	})
	if src, err := remote.Dial("tcp", netip.AddrPortFrom(routerIP4, 80)); err == nil {
		t.Errorf("a connection to the deleted router reached a server (as %s)", src)
	}
}

// TestAgentHandsBackAfterAStall: n1 holds a router, then stalls (its
// Lease seen lapsed: it fences, and its flows go) while the router moves
// to n2, which announces it. As n1 comes back, its switch may answer the
// neighbour requests queued meanwhile with its old flows: the external
// host's entries, and n2's own host stack's, are set to n1's MAC here, as
// those answers would set them, after n2's announcements are over. Once
// n1 unfences it hands the addresses back: the entries name n2 again
// within an announcement's round trip, where without it they would name
// n1 until they expire. (n2's switch answers ARP requests for the
// addresses itself, but lets the gratuitous ones through to its host.)
func TestAgentHandsBackAfterAStall(t *testing.T) {
	e := newEnv(t, 2)
	n1, n2 := e.topo.Nodes[0], e.topo.Nodes[1]
	var stalled atomic.Bool
	e.startAgent(n1, func(c *Config) {
		c.LeaseDuration = time.Second
		c.LastRenewed = func() time.Time {
			if stalled.Load() {
				return time.Now().Add(-time.Hour)
			}
			return time.Now()
		}
	}).waitHealthy(t)
	e.startAgent(n2).waitHealthy(t)
	e.createRouter(nov1.RedirectConfig{FallbackIP: e.topo.External.IP.String()})
	addrs := []netip.Addr{routerIP4, routerIP6}
	neighboursName := func(n *topology.Node) func() error {
		return func() error {
			for _, addr := range addrs {
				if got, want := e.externalNeighbour(addr), n.BridgeMAC(t); got != want {
					return fmt.Errorf("the external host's entry for %s: %q, want %s's %s", addr, got, n.Name, want)
				}
			}
			return nil
		}
	}
	e.setRouterHolder("billing", n1.Name)
	eventually(t, "the external host learns the router at n1", func() error {
		for _, addr := range addrs {
			// A resolution makes the entries, which announcements only update.
			_ = exec.Command("ip", "netns", "exec", e.topo.External.Netns, "ping", "-c", "1", "-W", "1", addr.String()).Run()
		}
		return neighboursName(n1)()
	})

	stalled.Store(true)
	eventually(t, "n1 fenced: no router flow", func() error {
		if c := routerFlows(t, n1); c != 0 {
			return fmt.Errorf("%d flows", c)
		}
		return nil
	})
	e.setRouterHolder("billing", n2.Name)
	eventually(t, "n2 announces the router", neighboursName(n2))
	time.Sleep(announceRepeats * announceInterval) // n2's announcements are over
	// The stale answers reach the holder's own host stack too (a client on
	// n2 sends through it).
	for _, addr := range addrs {
		e.topo.External.Exec(t, "ip", "neigh", "replace", addr.String(), "lladdr", n1.BridgeMAC(t), "dev", "eth0", "nud", "reachable")
		n2.Exec(t, "ip", "neigh", "replace", addr.String(), "lladdr", n1.BridgeMAC(t), "dev", n2.Bridge, "nud", "reachable")
	}
	if err := neighboursName(n1)(); err != nil {
		t.Fatalf("the stale answers' entries: %v", err)
	}
	holderNamesItself := func() error {
		for _, addr := range addrs {
			if out := n2.Exec(t, "ip", "neigh", "show", addr.String(), "dev", n2.Bridge); !strings.Contains(out, "lladdr "+n2.BridgeMAC(t)) {
				return fmt.Errorf("n2's own entry for %s: %q, want its bridge MAC %s", addr, strings.TrimSpace(out), n2.BridgeMAC(t))
			}
		}
		return nil
	}
	time.Sleep(1100 * time.Millisecond) // past the neighbour tables' locktime (1 s), which ignores a newer announcement
	stalled.Store(false)
	unfenced := time.Now()
	var err error
	for time.Since(unfenced) < announceInterval+time.Second {
		if err = cmp.Or(neighboursName(n2)(), holderNamesItself()); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%v after n1's Lease was renewed: n1 did not hand the addresses back", err)
	}
	t.Logf("the external host's entries, and n2's own, name n2 again %v after n1's Lease was renewed", time.Since(unfenced).Round(time.Millisecond))
}

// TestAgentRouterGateway: a router whose addresses name a gateway (the
// external host, on the segment) sends its redirected connections through
// it, where the holder's own routes lead nowhere (a blackhole route to the
// destinations): a pod's TCP and UDP connections reach the destination in
// both families, from the reserved address; the replies to the pod do not
// go to the gateway. Once the spec drops the gateways, the holder's own
// routes apply again: the connections fail, and the node keeps no route
// in egressflow's tables.
func TestAgentRouterGateway(t *testing.T) {
	e := newEnv(t, 1)
	n1 := e.topo.Nodes[0]
	client := e.addPod(n1, "client")
	e.startAgent(n1).waitHealthy(t)
	for _, dst := range internet {
		n1.Exec(t, "ip", "route", "add", "blackhole", netip.PrefixFrom(dst, dst.BitLen()).String())
	}
	capture := e.topo.External.Capture(t)
	serverPort := e.server.Addr.Port()
	e.createRouter(nov1.RedirectConfig{RedirectRules: []nov1.L4RedirectRule{
		{DestinationIP: internet[0].String(), Port: 80, Protocol: nov1.ProtocolTypeTCP, TargetPort: int32(serverPort)},
		{DestinationIP: internet[0].String(), Port: 80, Protocol: nov1.ProtocolTypeUDP, TargetPort: int32(serverPort)},
		{DestinationIP: internet[1].String(), Port: 81, Protocol: nov1.ProtocolTypeTCP, TargetPort: int32(serverPort)},
		{DestinationIP: internet[1].String(), Port: 81, Protocol: nov1.ProtocolTypeUDP, TargetPort: int32(serverPort)},
	}}, e.topo.External.IP, e.topo.External.IP6)
	routers := e.admin.ES.NetworkOperatorV1().EgressRouters("shop")
	ctx := context.Background()
	e.setRouterHolder("billing", n1.Name)
	ports := map[netip.Addr]uint16{routerIP4: 80, routerIP6: 81}
	for _, reserved := range []netip.Addr{routerIP4, routerIP6} {
		for _, network := range []string{"tcp", "udp"} {
			eventually(t, fmt.Sprintf("%s to %s through the gateway", network, reserved), func() error {
				src, err := client.Dial(network, netip.AddrPortFrom(reserved, ports[reserved]))
				if err != nil {
					return err
				}
				if src != reserved {
					return fmt.Errorf("the server saw source %s, want %s", src, reserved)
				}
				return nil
			})
		}
	}
	// (The pod's own neighbour solicitations are multicast: the bridge
	// floods them past the gateway.)
	for _, p := range capture.Stop() {
		if !p.Dst.IsMulticast() && (slices.Contains(client.Addrs(), p.Dst) || slices.Contains(client.Addrs(), p.Src)) {
			t.Errorf("the gateway received a packet of the pod's: %s", p.Line)
		}
	}

	// Without gateways the node's own routes apply: the blackhole.
	r, err := routers.Get(ctx, "billing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Spec.Addresses {
		r.Spec.Addresses[i].Gateway = ""
	}
	if _, err := routers.Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no route left in egressflow's tables", func() error {
		for _, family := range []string{"-4", "-6"} {
			for _, line := range strings.Split(n1.Exec(t, "ip", family, "route", "show", "table", "all"), "\n") {
				var table int
				if i := strings.Index(line, "table "); i >= 0 {
					fmt.Sscan(line[i+len("table "):], &table)
				}
				if dataplane.IsRouterTable(table) {
					return fmt.Errorf("%s", line)
				}
			}
		}
		return nil
	})
	for _, reserved := range []netip.Addr{routerIP4, routerIP6} {
		eventually(t, fmt.Sprintf("tcp to %s fails without the gateway", reserved), func() error {
			if src, err := client.Dial("tcp", netip.AddrPortFrom(reserved, ports[reserved])); err == nil {
				return fmt.Errorf("reached the server (as %s) past the holder's blackhole route", src)
			}
			return nil
		})
	}
}
