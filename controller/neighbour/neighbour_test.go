package neighbour

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/topology"
)

// startIn starts a Resolver on A's end of the pair, from inside A's
// namespace.
func startIn(t *testing.T, p *topology.Pair, refresh time.Duration, changes *atomic.Int64) *Resolver {
	t.Helper()
	var r *Resolver
	err := topology.InNetns(p.NsA, func() error {
		var err error
		r, err = Start(p.LinkA, refresh, func() { changes.Add(1) })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// linkMAC is the MAC of an interface in a namespace.
func linkMAC(t *testing.T, ns, link string) net.HardwareAddr {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-br", "link", "show", link).CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show %s: %v: %s", link, err, out)
	}
	fields := strings.Fields(string(out))
	mac, err := net.ParseMAC(fields[2])
	if err != nil {
		t.Fatalf("MAC of %s in %q: %v", link, out, err)
	}
	return mac
}

// waitMAC waits until the resolver's MAC for addr is want (nil: none);
// a bound, not a measurement.
func waitMAC(t *testing.T, r *Resolver, addr netip.Addr, want net.HardwareAddr, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		mac, ok := r.MAC(addr)
		if want == nil && !ok || want != nil && ok && mac.String() == want.String() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MAC of %s is %v (known %v) after %v, want %v", addr, mac, ok, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestResolvesWantedAddresses: wanted addresses of both families are
// resolved by ARP and neighbour discovery without any other traffic, the
// callback is told, and an address nothing answers for has no MAC.
func TestResolvesWantedAddresses(t *testing.T) {
	p := topology.NewPair(t)
	var changes atomic.Int64
	r := startIn(t, p, time.Second, &changes)
	absent := netip.MustParseAddr("192.0.2.200")
	r.Want([]netip.Addr{p.B4, p.B6, absent})
	peer := linkMAC(t, p.NsB, p.LinkB)
	waitMAC(t, r, p.B4, peer, 5*time.Second)
	waitMAC(t, r, p.B6, peer, 5*time.Second)
	if changes.Load() < 2 {
		t.Fatalf("the callback was told %d times for two resolved addresses", changes.Load())
	}
	// The kernel gives up on the absent address after its probes (3 at
	// 1 s by default).
	time.Sleep(4 * time.Second)
	if mac, ok := r.MAC(absent); ok {
		t.Fatalf("an address nothing answers for has MAC %v", mac)
	}
	// Not wanted any more: forgotten.
	r.Want([]netip.Addr{p.B6})
	if _, ok := r.MAC(p.B4); ok {
		t.Fatal("an address no longer wanted still has a MAC")
	}
}

// TestFollowsANewMAC: a gateway whose MAC changes, without announcing it,
// is found at its new MAC once the kernel's entry goes stale and a
// refresh has it probed. The namespace's neighbour timers are shortened
// so that this takes seconds, not the default minute.
func TestFollowsANewMAC(t *testing.T) {
	p := topology.NewPair(t)
	for _, family := range []string{"ipv4", "ipv6"} {
		for _, s := range []string{"base_reachable_time_ms=500", "delay_first_probe_time=1"} {
			if out, err := exec.Command("ip", "netns", "exec", p.NsA, "sysctl", "-qw", "net."+family+".neigh."+p.LinkA+"."+s).CombinedOutput(); err != nil {
				t.Fatalf("sysctl %s: %v: %s", s, err, out)
			}
		}
	}
	var changes atomic.Int64
	r := startIn(t, p, 300*time.Millisecond, &changes)
	r.Want([]netip.Addr{p.B4, p.B6})
	waitMAC(t, r, p.B4, linkMAC(t, p.NsB, p.LinkB), 5*time.Second)
	moved := net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x20, 0x30}
	if out, err := exec.Command("ip", "-n", p.NsB, "link", "set", p.LinkB, "address", moved.String()).CombinedOutput(); err != nil {
		t.Fatalf("set B's MAC: %v: %s", err, out)
	}
	waitMAC(t, r, p.B4, moved, 15*time.Second)
	waitMAC(t, r, p.B6, moved, 15*time.Second)
}

// TestFollowsALinkMadeAgain: the link deleted and made again under its
// name (as Open vSwitch makes a bridge's internal port again when it
// restarts), with a new index: the MACs learnt on the old one go, and a
// refresh finds the link and the wanted addresses on it again, at the
// peer's new MAC.
func TestFollowsALinkMadeAgain(t *testing.T) {
	p := topology.NewPair(t)
	var changes atomic.Int64
	r := startIn(t, p, 300*time.Millisecond, &changes)
	r.Want([]netip.Addr{p.B4, p.B6})
	waitMAC(t, r, p.B4, linkMAC(t, p.NsB, p.LinkB), 5*time.Second)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("-n", p.NsA, "link", "delete", p.LinkA) // and its peer
	waitMAC(t, r, p.B4, nil, 5*time.Second)
	moved := net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x20, 0x31}
	ip("-n", p.NsA, "link", "add", p.LinkA, "type", "veth", "peer", "name", p.LinkB, "netns", p.NsB, "address", moved.String())
	for _, end := range []struct {
		ns, name string
		v4, v6   netip.Addr
	}{{p.NsA, p.LinkA, p.A4, p.A6}, {p.NsB, p.LinkB, p.B4, p.B6}} {
		ip("-n", end.ns, "addr", "add", end.v4.String()+"/24", "dev", end.name)
		ip("-n", end.ns, "addr", "add", end.v6.String()+"/64", "dev", end.name, "nodad")
		ip("-n", end.ns, "link", "set", end.name, "up")
	}
	waitMAC(t, r, p.B4, moved, 5*time.Second)
	waitMAC(t, r, p.B6, moved, 5*time.Second)
}
