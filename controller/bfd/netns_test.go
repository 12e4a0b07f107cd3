package bfd

import (
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressflow/egressflow/test/ovstest"
	"github.com/egressflow/egressflow/test/topology"
)

// The two ends of a test link. These addresses exist only inside the
// test's namespaces.
var (
	addrA4, addrB4 = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	addrA6, addrB6 = netip.MustParseAddr("fd00:bfd::1"), netip.MustParseAddr("fd00:bfd::2")
)

// pair is two network namespaces joined by a veth, dual-stack.
type pair struct {
	nsA, nsB string
	linkB    string // B's end of the veth
}

func newPair(t testing.TB) *pair {
	t.Helper()
	requireRoot(t)
	p := &pair{nsA: ovstest.UniqueName("bfda"), nsB: ovstest.UniqueName("bfdb"), linkB: "vb"}
	for _, ns := range []string{p.nsA, p.nsB} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	tmpA, tmpB := ovstest.UniqueName("va"), ovstest.UniqueName("vb")
	run(t, "ip", "link", "add", tmpA, "type", "veth", "peer", "name", tmpB)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "delete", tmpA).Run() })
	for _, end := range []struct {
		tmp, ns, name string
		v4, v6        netip.Addr
	}{{tmpA, p.nsA, "va", addrA4, addrA6}, {tmpB, p.nsB, p.linkB, addrB4, addrB6}} {
		run(t, "ip", "link", "set", end.tmp, "netns", end.ns)
		run(t, "ip", "-n", end.ns, "link", "set", end.tmp, "name", end.name)
		// Keep the IPv6 address over a link down and up, as the IPv4 one is.
		run(t, "ip", "netns", "exec", end.ns, "sysctl", "-qw", "net.ipv6.conf."+end.name+".keep_addr_on_down=1")
		run(t, "ip", "-n", end.ns, "addr", "add", end.v4.String()+"/24", "dev", end.name)
		run(t, "ip", "-n", end.ns, "addr", "add", end.v6.String()+"/64", "dev", end.name, "nodad")
		run(t, "ip", "-n", end.ns, "link", "set", end.name, "up")
	}
	return p
}

// setLinkB takes B's end of the link down or up: a path that stops
// forwarding, without either side being told.
func (p *pair) setLinkB(t testing.TB, up bool) {
	t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	run(t, "ip", "-n", p.nsB, "link", "set", p.linkB, state)
}

// listenIn starts an Engine in namespace ns, closed when the test ends;
// changes collects what its callback was handed.
func listenIn(t testing.TB, ns string, cfg Config) (*Engine, *changes) {
	t.Helper()
	c := &changes{}
	var e *Engine
	err := topology.InNetns(ns, func() error {
		var err error
		e, err = Listen(cfg, c.record)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, c
}

// addIn adds sessions from inside ns, where their sockets must live.
func addIn(t testing.TB, ns string, e *Engine, peers ...netip.Addr) {
	t.Helper()
	err := topology.InNetns(ns, func() error {
		for _, p := range peers {
			if err := e.Add(p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type changes struct {
	mu  sync.Mutex
	all []timedChange
}

type timedChange struct {
	Change
	at time.Time
}

func (c *changes) record(ch Change) {
	c.mu.Lock()
	c.all = append(c.all, timedChange{ch, time.Now()})
	c.mu.Unlock()
}

// last returns the last change reported for peer.
func (c *changes) last(peer netip.Addr) (timedChange, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.all) - 1; i >= 0; i-- {
		if c.all[i].Peer == peer {
			return c.all[i], true
		}
	}
	return timedChange{}, false
}

// sessionSetUp bounds how long two systems take to bring a session Up:
// two or three packets at the slow 1 s interval that a session not Up
// uses, with their jitter.
const sessionSetUp = 10 * time.Second

// waitState waits until the session to peer is in want; a bound, not a
// measurement.
func waitState(t testing.TB, e *Engine, peer netip.Addr, want State, within time.Duration) Diag {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, d, ok := e.State(peer)
		if ok && st == want {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("session to %s is %v (%v, exists %v) after %v, want %v", peer, st, d, ok, within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func requireRoot(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("id", "-u").Output(); err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Fatal("needs root for network namespaces: run as root (make test does)")
	}
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
