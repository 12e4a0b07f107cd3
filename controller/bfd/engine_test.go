package bfd

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/egressflow/egressflow/test/topology"
)

// TestEnginesDetectALostPath: two engines in two namespaces bring their
// sessions Up over real UDP, IPv4 and IPv6; a path that stops forwarding
// takes them Down as an expired detection time, told through the
// callback; and they come back Up with the path.
func TestEnginesDetectALostPath(t *testing.T) {
	p := topology.NewPair(t)
	a, aChanges := listenIn(t, p.NsA, Config{})
	b, _ := listenIn(t, p.NsB, Config{})
	addIn(t, p.NsA, a, p.B4, p.B6)
	addIn(t, p.NsB, b, p.A4, p.A6)
	for _, peer := range []netip.Addr{p.B4, p.B6} {
		waitState(t, a, peer, Up, sessionSetUp)
	}
	for _, peer := range []netip.Addr{p.A4, p.A6} {
		waitState(t, b, peer, Up, sessionSetUp)
	}
	if ch, ok := aChanges.last(p.B4); !ok || ch.State != Up {
		t.Fatalf("the callback's last change for %s: %+v (reported %v), want Up", p.B4, ch, ok)
	}

	p.SetLinkB(t, false)
	for _, peer := range []netip.Addr{p.B4, p.B6} {
		// 3 x 100 ms detects it; the bound leaves room for a loaded machine.
		if d := waitState(t, a, peer, Down, 5*time.Second); d != DiagControlDetectionExpired {
			t.Errorf("session to %s went down with %v, want %v", peer, d, DiagControlDetectionExpired)
		}
		if ch, _ := aChanges.last(peer); ch.State != Down || ch.Diag != DiagControlDetectionExpired {
			t.Errorf("the callback's last change for %s: %+v", peer, ch)
		}
	}

	p.SetLinkB(t, true)
	for _, peer := range []netip.Addr{p.B4, p.B6} {
		waitState(t, a, peer, Up, sessionSetUp)
	}
}

// TestRemoveSignalsAdministrativeDown: a session removed on one side is
// taken Down on the other as the neighbour's decision, not as a failure.
func TestRemoveSignalsAdministrativeDown(t *testing.T) {
	p := topology.NewPair(t)
	a, _ := listenIn(t, p.NsA, Config{})
	b, _ := listenIn(t, p.NsB, Config{})
	addIn(t, p.NsA, a, p.B4)
	addIn(t, p.NsB, b, p.A4)
	waitState(t, b, p.A4, Up, sessionSetUp)
	a.Remove(p.B4)
	if _, _, ok := a.State(p.B4); ok {
		t.Fatal("the removed session is still listed")
	}
	if d := waitState(t, b, p.A4, Down, 5*time.Second); d != DiagNeighborSignaledDown {
		t.Fatalf("the peer's session went down with %v, want %v", d, DiagNeighborSignaledDown)
	}
}

// TestOnlyTTL255IsAccepted: a packet that could have crossed a router
// (TTL below 255) is discarded, and the same packet with TTL 255 is
// applied (RFC 5881 section 5).
func TestOnlyTTL255IsAccepted(t *testing.T) {
	p := topology.NewPair(t)
	a, _ := listenIn(t, p.NsA, Config{})
	addIn(t, p.NsA, a, p.B4)
	hello := Packet{State: Down, DetectMult: 3, MyDiscriminator: 99, DesiredMinTx: time.Second, RequiredMinRx: time.Second}
	sendFromB := func(ttl int) {
		t.Helper()
		err := topology.InNetns(p.NsB, func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.A4, ControlPort)))
			if err != nil {
				return err
			}
			defer c.Close()
			if err := ipv4.NewConn(c).SetTTL(ttl); err != nil {
				return err
			}
			_, err = c.Write(hello.Append(nil))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	before := a.Discarded.Load()
	sendFromB(64)
	deadline := time.Now().Add(5 * time.Second)
	for a.Discarded.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("the TTL 64 packet was neither applied nor discarded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, _, _ := a.State(p.B4); st != Down {
		t.Fatalf("a TTL 64 packet moved the session to %v", st)
	}
	sendFromB(255)
	waitState(t, a, p.B4, Init, 5*time.Second)
}
