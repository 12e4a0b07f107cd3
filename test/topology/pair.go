package topology

import (
	"net/netip"
	"os/exec"
	"testing"

	"github.com/egressflow/egressflow/test/ovstest"
)

// Pair is the smallest network: two namespaces, A and B, joined by a
// veth, dual-stack, for tests of what two hosts on one link say to each
// other (BFD, neighbour discovery). Its addresses exist only inside its
// namespaces, and everything is removed by t.Cleanup.
type Pair struct {
	NsA, NsB     string
	LinkA, LinkB string // each end's interface, in its namespace
	A4, B4       netip.Addr
	A6, B6       netip.Addr
}

// NewPair creates a Pair: A holds 192.0.2.1/24 and fd00:192:0:2::1/64, B
// holds .2 and ::2. IPv6 addresses skip duplicate address detection and,
// like the IPv4 ones, survive their link going down and up.
func NewPair(t testing.TB) *Pair {
	t.Helper()
	p := &Pair{NsA: ovstest.UniqueName("pa"), NsB: ovstest.UniqueName("pb"), LinkA: "va", LinkB: "vb",
		A4: netip.MustParseAddr("192.0.2.1"), B4: netip.MustParseAddr("192.0.2.2"),
		A6: netip.MustParseAddr("fd00:192:0:2::1"), B6: netip.MustParseAddr("fd00:192:0:2::2")}
	for _, ns := range []string{p.NsA, p.NsB} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	link(t, p.NsA, p.LinkA, p.NsB, p.LinkB)
	for _, end := range []struct {
		ns, name string
		v4, v6   netip.Addr
	}{{p.NsA, p.LinkA, p.A4, p.A6}, {p.NsB, p.LinkB, p.B4, p.B6}} {
		run(t, "ip", "netns", "exec", end.ns, "sysctl", "-qw", "net.ipv6.conf."+end.name+".keep_addr_on_down=1")
		run(t, "ip", "-n", end.ns, "addr", "add", end.v4.String()+"/24", "dev", end.name)
		run(t, "ip", "-n", end.ns, "addr", "add", end.v6.String()+"/64", "dev", end.name, "nodad")
	}
	return p
}

// SetLinkB takes B's end of the link down or up: a path that stops
// forwarding, without either side being told.
func (p *Pair) SetLinkB(t testing.TB, up bool) {
	t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	run(t, "ip", "-n", p.NsB, "link", "set", p.LinkB, state)
}
