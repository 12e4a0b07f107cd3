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
	p := newPair(t)
	a, aChanges := listenIn(t, p.nsA, Config{})
	b, _ := listenIn(t, p.nsB, Config{})
	addIn(t, p.nsA, a, addrB4, addrB6)
	addIn(t, p.nsB, b, addrA4, addrA6)
	for _, peer := range []netip.Addr{addrB4, addrB6} {
		waitState(t, a, peer, Up, sessionSetUp)
	}
	for _, peer := range []netip.Addr{addrA4, addrA6} {
		waitState(t, b, peer, Up, sessionSetUp)
	}
	if ch, ok := aChanges.last(addrB4); !ok || ch.State != Up {
		t.Fatalf("the callback's last change for %s: %+v (reported %v), want Up", addrB4, ch, ok)
	}

	p.setLinkB(t, false)
	for _, peer := range []netip.Addr{addrB4, addrB6} {
		// 3 x 100 ms detects it; the bound leaves room for a loaded machine.
		if d := waitState(t, a, peer, Down, 5*time.Second); d != DiagControlDetectionExpired {
			t.Errorf("session to %s went down with %v, want %v", peer, d, DiagControlDetectionExpired)
		}
		if ch, _ := aChanges.last(peer); ch.State != Down || ch.Diag != DiagControlDetectionExpired {
			t.Errorf("the callback's last change for %s: %+v", peer, ch)
		}
	}

	p.setLinkB(t, true)
	for _, peer := range []netip.Addr{addrB4, addrB6} {
		waitState(t, a, peer, Up, sessionSetUp)
	}
}

// TestRemoveSignalsAdministrativeDown: a session removed on one side is
// taken Down on the other as the neighbour's decision, not as a failure.
func TestRemoveSignalsAdministrativeDown(t *testing.T) {
	p := newPair(t)
	a, _ := listenIn(t, p.nsA, Config{})
	b, _ := listenIn(t, p.nsB, Config{})
	addIn(t, p.nsA, a, addrB4)
	addIn(t, p.nsB, b, addrA4)
	waitState(t, b, addrA4, Up, sessionSetUp)
	a.Remove(addrB4)
	if _, _, ok := a.State(addrB4); ok {
		t.Fatal("the removed session is still listed")
	}
	if d := waitState(t, b, addrA4, Down, 5*time.Second); d != DiagNeighborSignaledDown {
		t.Fatalf("the peer's session went down with %v, want %v", d, DiagNeighborSignaledDown)
	}
}

// TestOnlyTTL255IsAccepted: a packet that could have crossed a router
// (TTL below 255) is discarded, and the same packet with TTL 255 is
// applied (RFC 5881 section 5).
func TestOnlyTTL255IsAccepted(t *testing.T) {
	p := newPair(t)
	a, _ := listenIn(t, p.nsA, Config{})
	addIn(t, p.nsA, a, addrB4)
	hello := Packet{State: Down, DetectMult: 3, MyDiscriminator: 99, DesiredMinTx: time.Second, RequiredMinRx: time.Second}
	sendFromB := func(ttl int) {
		t.Helper()
		err := topology.InNetns(p.nsB, func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA4, ControlPort)))
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
	if st, _, _ := a.State(addrB4); st != Down {
		t.Fatalf("a TTL 64 packet moved the session to %v", st)
	}
	sendFromB(255)
	waitState(t, a, addrB4, Init, 5*time.Second)
}
