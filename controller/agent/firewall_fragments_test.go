package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	esv1 "github.com/egressflow/egressflow/controller/apis/egressservice/v1"
	"github.com/egressflow/egressflow/controller/dataplane"
	"github.com/egressflow/egressflow/test/topology"
)

// The datagrams of TestAgentFirewallFragments.
const (
	// fragPayload is the UDP payload of a fragmented datagram: over the
	// pods' 1500-byte MTU, so that the pod's kernel sends it in IP
	// fragments (three, in either family), and the external host's
	// kernel reassembles it for the listening socket.
	fragPayload = 3000
	// wholePayload is the UDP payload of a datagram sent whole.
	wholePayload = 100
	// fragDatagrams is how many datagrams each case sends: enough that a
	// leak is not chance, few enough that a case takes well under a second.
	fragDatagrams = 20
	// fragGap is the pause between two datagrams of a case, so that the
	// userspace datapath's port queues never overflow (a datagram lost
	// there would pass for one the firewall dropped, or fail a case that
	// expects them all).
	fragGap = 2 * time.Millisecond
	// fragSettle is how long a case that expects nothing waits after its
	// last datagram before it reads the count: datagrams cross these veths
	// in well under a millisecond.
	fragSettle = 500 * time.Millisecond
	// fragArrival bounds how long a case that expects every datagram waits
	// for the last one.
	fragArrival = 5 * time.Second
)

// The ports of TestAgentFirewallFragments on the external host: a Deny
// with ports names fragDeniedPort, an Allow with ports fragAllowedPort.
const (
	fragDeniedPort  uint16 = 5353
	fragAllowedPort uint16 = 5300
)

// datagramCounter listens for UDP on addresses and ports of a host and
// counts the datagrams each socket receives, by their size (a fragmented
// datagram counts once, reassembled by the host's kernel). It answers
// each with the source it saw, as topology's SourceServer does, so that a
// pod's Dial tells whether its datagrams arrive.
type datagramCounter struct {
	mu     sync.Mutex
	counts map[datagramKey]int
}

type datagramKey struct {
	at   netip.AddrPort // the socket's
	size int
}

// countDatagrams starts a datagramCounter on each address and port in
// host's namespace; its sockets close when the test ends.
func countDatagrams(t testing.TB, host *topology.Host, addrs []netip.Addr, ports []uint16) *datagramCounter {
	t.Helper()
	c := &datagramCounter{counts: map[datagramKey]int{}}
	for _, a := range addrs {
		for _, port := range ports {
			at := netip.AddrPortFrom(a, port)
			network := "udp4"
			if a.Is6() {
				network = "udp6"
			}
			var conn net.PacketConn
			if err := topology.InNetns(host.Netns, func() error {
				var err error
				conn, err = net.ListenPacket(network, at.String())
				return err
			}); err != nil {
				t.Fatalf("listen on %s of %s: %v", at, host.Name, err)
			}
			t.Cleanup(func() { conn.Close() })
			go c.serve(conn, at)
		}
	}
	return c
}

func (c *datagramCounter) serve(conn net.PacketConn, at netip.AddrPort) {
	buf := make([]byte, 1<<16)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		c.mu.Lock()
		c.counts[datagramKey{at, n}]++
		c.mu.Unlock()
		_, _ = conn.WriteTo([]byte(from.(*net.UDPAddr).AddrPort().Addr().Unmap().String()+"\n"), from)
	}
}

// count is how many datagrams of size arrived at at.
func (c *datagramCounter) count(at netip.AddrPort, size int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[datagramKey{at, size}]
}

// nPackets reads a flow's packet count from dump-flows.
var nPackets = regexp.MustCompile(`n_packets=(\d+)`)

// TestAgentFirewallFragments judges fragmented UDP datagrams on the
// userspace datapath, whose connection tracker hands on a datagram's IP
// fragments rather than the reassembled datagram, and whose flows read
// every fragment's ports as 0. A pod of shop sends datagrams of 3,000
// bytes (fragmented by its kernel) and of 100 bytes (whole) to the
// external host, under
//
//	0, 1: Allow UDP to the external host's address (IPv4, IPv6) on one port
//	2, 3: Deny UDP to the same addresses on another port
//
// and nothing about a second address of the host. A listening socket on
// the host counts the datagrams that arrive, reassembled. In both
// families:
//   - fragmented to the denied port: none arrives (the Deny's fragment
//     flow drops every fragment; without it, all would);
//   - whole to the allowed port: every one arrives;
//   - fragmented to the second address, on the denied port too: every one
//     arrives (no rule with ports judges that address);
//   - fragmented to the allowed port of the first address: none arrives,
//     the documented cost of failing closed (docs/egressfirewall.md,
//     "Fragments"): the fragments' ports are unknown, and a Deny with
//     ports of UDP covers the address.
//
// The Deny's fragment flows count the dropped fragments: every fragment
// in IPv4, the first of each datagram in IPv6 (the bridge reads the
// protocol of a later IPv6 fragment as 44, its Fragment header).
func TestAgentFirewallFragments(t *testing.T) {
	e := newEnv(t, 1)
	n := e.topo.Nodes[0]
	app := e.addPod(n, "app")
	e.routeInternet()
	denied := []netip.Addr{e.topo.External.IP, e.topo.External.IP6} // a Deny with ports covers them
	other := internet                                               // no rule covers them
	counter := countDatagrams(t, e.topo.External, append(append([]netip.Addr(nil), denied...), other...),
		[]uint16{fragDeniedPort, fragAllowedPort})

	udp := func(port uint16) []esv1.EgressFirewallPort {
		return []esv1.EgressFirewallPort{{Protocol: "UDP", Port: int32(port)}}
	}
	host := func(a netip.Addr) esv1.EgressFirewallDestination {
		return esv1.EgressFirewallDestination{CIDRSelector: netip.PrefixFrom(a, a.BitLen()).String()}
	}
	fw := &esv1.EgressFirewall{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: esv1.EgressFirewallName},
		Spec: esv1.EgressFirewallSpec{Egress: []esv1.EgressFirewallRule{
			{Type: esv1.EgressFirewallRuleAllow, To: host(denied[0]), Ports: udp(fragAllowedPort)},
			{Type: esv1.EgressFirewallRuleAllow, To: host(denied[1]), Ports: udp(fragAllowedPort)},
			{Type: esv1.EgressFirewallRuleDeny, To: host(denied[0]), Ports: udp(fragDeniedPort)},
			{Type: esv1.EgressFirewallRuleDeny, To: host(denied[1]), Ports: udp(fragDeniedPort)},
		}},
	}
	if _, err := e.admin.ES.K8sV1().EgressFirewalls("shop").Create(context.Background(), fw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startAgent(n).waitHealthy(t)

	// send sends fragDatagrams datagrams of size bytes from app to dst.
	send := func(dst netip.AddrPort, size int) {
		t.Helper()
		conn, err := app.Connect("udp", dst)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		payload := make([]byte, size)
		for range fragDatagrams {
			if _, err := conn.Write(payload); err != nil {
				t.Fatalf("send to %s: %v", dst, err)
			}
			time.Sleep(fragGap)
		}
	}
	// arrived sends and returns how many arrived: waiting for them all
	// if all are expected, else fragSettle after the last.
	arrived := func(what string, dst netip.AddrPort, size int, all bool) int {
		t.Helper()
		before := counter.count(dst, size)
		send(dst, size)
		if all {
			deadline := time.Now().Add(fragArrival)
			for counter.count(dst, size)-before < fragDatagrams && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		} else {
			time.Sleep(fragSettle)
		}
		got := counter.count(dst, size) - before
		t.Logf("%s (%s, %d-byte payloads): %d of %d datagrams arrived", what, dst, size, got, fragDatagrams)
		return got
	}
	// fragmentsDropped sums the packet counters of the Deny's fragment
	// flows of a family ("udp" or "udp6").
	fragmentsDropped := func(family string) int {
		t.Helper()
		out := n.Ofctl(t, "dump-flows", n.Bridge, fmt.Sprintf("cookie=%#x/%#x", dataplane.Cookie(dataplane.KindFirewallDeny, ""), dataplane.KindCookieMask))
		total := 0
		for _, line := range strings.Split(out, "\n") {
			if !strings.Contains(line, "nw_frag=yes") || !strings.Contains(line, ","+family+",") {
				continue
			}
			if m := nPackets.FindStringSubmatch(line); m != nil {
				v, _ := strconv.Atoi(m[1])
				total += v
			}
		}
		return total
	}

	for i, family := range []string{"udp", "udp6"} {
		d, o := denied[i], other[i]
		deniedAt, allowedAt := netip.AddrPortFrom(d, fragDeniedPort), netip.AddrPortFrom(d, fragAllowedPort)
		// The firewall is in place: a whole datagram to the denied port
		// gets no answer, one to the allowed port does.
		e.expectDenied(app, "udp", deniedAt)
		eventually(t, fmt.Sprintf("%s to %s answered", family, allowedAt), func() error {
			_, err := app.Dial("udp", allowedAt)
			return err
		})
		before := fragmentsDropped(family)

		if got := arrived("whole, to the allowed port", allowedAt, wholePayload, true); got != fragDatagrams {
			t.Errorf("%s: %d of %d whole datagrams to the allowed port %s arrived, want all", family, got, fragDatagrams, allowedAt)
		}
		for _, port := range []uint16{fragDeniedPort, fragAllowedPort} {
			at := netip.AddrPortFrom(o, port)
			if got := arrived("fragmented, to an address no Deny with ports covers", at, fragPayload, true); got != fragDatagrams {
				t.Errorf("%s: %d of %d fragmented datagrams to %s arrived, want all: no rule judges that address", family, got, fragDatagrams, at)
			}
		}
		if got := arrived("fragmented, to the denied port", deniedAt, fragPayload, false); got != 0 {
			t.Errorf("%s: %d of %d fragmented datagrams to the denied port %s arrived, want none", family, got, fragDatagrams, deniedAt)
		}
		if got := arrived("fragmented, to the allowed port of the same address (failing closed)", allowedAt, fragPayload, false); got != 0 {
			t.Errorf("%s: %d of %d fragmented datagrams to the allowed port %s arrived; want none: a Deny with ports of UDP covers the address, so its fragments are dropped (docs/egressfirewall.md, \"Fragments\")",
				family, got, fragDatagrams, allowedAt)
		}
		// Of each of the 2 × fragDatagrams datagrams, in IPv4 every
		// fragment (at least two), in IPv6 the first: the bridge reads
		// the protocol of a later IPv6 fragment as its Fragment header's,
		// so the rules without ports judge those (here: none, they go on,
		// and the external host cannot reassemble them without the
		// first).
		perDatagram := map[string]int{"udp": 2, "udp6": 1}[family]
		if got, want := fragmentsDropped(family)-before, perDatagram*2*fragDatagrams; got < want {
			t.Errorf("%s: the Deny's fragment flows counted %d packets, want at least %d (%d of each datagram)", family, got, want, perDatagram)
		} else {
			t.Logf("%s: the Deny's fragment flows dropped %d fragments of %d datagrams", family, got, 2*fragDatagrams)
		}
	}
}
