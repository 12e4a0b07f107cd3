package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/test/topology"
)

// More egress IPs of the spread test, on the underlay segment.
var (
	egressIP4c = netip.MustParseAddr("172.18.0.52")
	egressIP6b = netip.MustParseAddr("fd00:172:18::51")
)

// spreadConnections is how many connections a pod opens to see its
// EgressIP's addresses shared among them: with two addresses, the chance
// that all of them take the same one is 2·2⁻²⁴.
const spreadConnections = 24

// TestAgentEgressIPSpread moves real packets through three nodes whose
// EgressIP billing holds, of IPv6, fd00:172:18::50 on n1 and
// fd00:172:18::51 on n2, and of IPv4 first 172.18.0.50 on n1 alone. Pod a
// runs on n3, which holds none at first, pod b on n1. Connections that a
// opens while one IPv4 address is held keep it when a second comes
// (172.18.0.51, on n2): from then on each pod's new connections, TCP and
// UDP, are spread over both addresses of each family (some leave with one,
// some with the other), and those keep their address too when a third
// IPv4 address comes (172.18.0.52, on n3). When n1's IPv4 address goes,
// the UDP flows that had it move to another, and the others stay. The
// external host never sees a pod IP.
func TestAgentEgressIPSpread(t *testing.T) {
	e := newEnv(t, 3)
	n1, n2, n3 := e.topo.Nodes[0], e.topo.Nodes[1], e.topo.Nodes[2]
	web := map[string]string{"app": "web"}
	a, b := e.addLabelledPod(n3, "a", web), e.addLabelledPod(n1, "b", web)
	for _, n := range e.topo.Nodes {
		e.startAgent(n).waitHealthy(t)
	}
	e.labelNamespace(map[string]string{"team": "billing"})
	spec := esv1.EgressIPSpec{
		EgressIPs:         []string{egressIP4.String(), egressIP4b.String(), egressIP4c.String(), egressIP6.String(), egressIP6b.String()},
		NamespaceSelector: esv1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}},
		PodSelector:       esv1.LabelSelector{MatchLabels: web},
	}
	holders := map[netip.Addr]string{egressIP4: n1.Name, egressIP6: n1.Name, egressIP6b: n2.Name}
	e.setEgressIP("billing", spec, holders)
	e.expectSpread(a, "udp", e.server.Addr, egressIP4)
	capture := e.topo.External.Capture(t)

	// Connections opened while one address was held keep it when a
	// second comes; new ones take either.
	pinned := e.openConnections(a, spreadConnections/2)
	holders[egressIP4b] = n2.Name
	e.setEgressIP("billing", spec, holders)
	for _, p := range []*topology.Pod{a, b} {
		for _, network := range []string{"tcp", "udp"} {
			e.expectSpread(p, network, e.server.Addr, egressIP4, egressIP4b)
			e.expectSpread(p, network, e.server.Addr6, egressIP6, egressIP6b)
		}
	}
	pinned.expectKept(t, nil)

	// Spread connections keep their address when another comes.
	spread := e.openConnections(a, spreadConnections)
	holders[egressIP4c] = n3.Name
	e.setEgressIP("billing", spec, holders)
	e.expectSpread(a, "udp", e.server.Addr, egressIP4, egressIP4b, egressIP4c)
	spread.expectKept(t, nil)
	pinned.expectKept(t, nil)

	// When an address goes, only the connections that had it move.
	delete(holders, egressIP4)
	e.setEgressIP("billing", spec, holders)
	e.expectSpread(a, "udp", e.server.Addr, egressIP4b, egressIP4c)
	spread.expectKept(t, &egressIP4)

	for _, p := range capture.Stop() {
		for _, pod := range []*topology.Pod{a, b} {
			// A pod's neighbour solicitations for its gateway are flooded
			// on the segment, as every pod's are: not egress.
			if slices.Contains(pod.Addrs(), p.Src) && !p.Dst.IsMulticast() {
				t.Errorf("the external host saw a selected pod's IP: %s", p)
			}
		}
	}
}

// expectSpread waits until spreadConnections new connections of pod to
// server are seen with exactly the sources want between them.
func (e *env) expectSpread(pod *topology.Pod, network string, server netip.AddrPort, want ...netip.Addr) {
	e.t.Helper()
	eventually(e.t, fmt.Sprintf("%s connections from %s to %s seen as each of %v", network, pod.Name, server, want), func() error {
		seen := map[netip.Addr]int{}
		for range spreadConnections {
			got, err := pod.Dial(network, server)
			if err != nil {
				return err
			}
			seen[got]++
		}
		if got := slices.SortedFunc(maps.Keys(seen), netip.Addr.Compare); !slices.Equal(got, want) {
			return fmt.Errorf("seen as %v", seen)
		}
		return nil
	})
}

// openConnection is one connection a test keeps open, and the source the
// server first saw it with.
type openConnection struct {
	network string
	conn    *topology.Conn
	source  netip.Addr
}

type openConnections []openConnection

// openConnections opens n TCP and n UDP connections from pod to the IPv4
// server and records the source each is seen with.
func (e *env) openConnections(pod *topology.Pod, n int) openConnections {
	e.t.Helper()
	var out openConnections
	for _, network := range []string{"tcp", "udp"} {
		for range n {
			conn, err := pod.Connect(network, e.server.Addr)
			if err != nil {
				e.t.Fatal(err)
			}
			e.t.Cleanup(func() { conn.Close() })
			source, err := conn.Probe()
			if err != nil {
				e.t.Fatalf("%s connection from %s: %v", network, pod.Name, err)
			}
			out = append(out, openConnection{network, conn, source})
		}
	}
	return out
}

// expectKept probes every open connection: each answers from the source
// it had, unless that is gone (not nil): a UDP flow that had it answers
// from another address now (and keeps that), a TCP connection that had it
// is left alone (the new address's holder has no state of it); some UDP
// flow must have had gone.
func (open openConnections) expectKept(t *testing.T, gone *netip.Addr) {
	t.Helper()
	kept, moved := 0, 0
	for i := range open {
		c := &open[i]
		if gone != nil && c.source == *gone {
			if c.network == "tcp" {
				continue
			}
			got, err := c.conn.Probe()
			switch {
			case err != nil:
				t.Errorf("udp flow %s, which had %s: %v", c.conn.LocalAddr(), *gone, err)
			case got == *gone:
				t.Errorf("udp flow %s still seen as %s, which is no longer held", c.conn.LocalAddr(), got)
			default:
				c.source = got
				moved++
			}
			continue
		}
		got, err := c.conn.Probe()
		if err != nil {
			t.Errorf("%s connection %s, seen as %s: %v", c.network, c.conn.LocalAddr(), c.source, err)
			continue
		}
		if got != c.source {
			t.Errorf("%s connection %s moved from %s to %s", c.network, c.conn.LocalAddr(), c.source, got)
		}
		kept++
	}
	if gone != nil && moved == 0 {
		t.Errorf("no UDP flow had %s, which went: the test shows nothing", *gone)
	}
	t.Logf("%d open connections kept their address; %d UDP flows moved off a gone one", kept, moved)
}
