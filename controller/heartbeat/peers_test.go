package heartbeat

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

// peer serves PeerPath on loopback for an agent whose renewer's last
// attempt succeeded or not, and returns its address.
func peer(t *testing.T, renewing bool) netip.AddrPort {
	t.Helper()
	r, err := NewRenewer(fake.NewClientset().CoordinationV1(), RenewerConfig{Namespace: "ns", NodeName: "peer"})
	if err != nil {
		t.Fatal(err)
	}
	r.failing.Store(!renewing)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: PeerHandler("peer", r)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// closedPort is an address where nothing listens.
func closedPort(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	return addr
}

// TestPeerProbe: an agent that cannot renew asks its peers over HTTP and
// sees a shared outage only when the disruption rule holds over itself
// and the peers that answered that they cannot renew either; a peer that
// does not answer counts as renewing.
func TestPeerProbe(t *testing.T) {
	for _, c := range []struct {
		name  string
		peers func(t *testing.T) []netip.AddrPort
		want  bool
	}{
		{"every peer fails too", func(t *testing.T) []netip.AddrPort { return []netip.AddrPort{peer(t, false), peer(t, false)} }, true},
		{"one of two peers renews", func(t *testing.T) []netip.AddrPort { return []netip.AddrPort{peer(t, false), peer(t, true)} }, false},
		{"peers unreachable", func(t *testing.T) []netip.AddrPort { return []netip.AddrPort{closedPort(t), closedPort(t)} }, false},
		{"three of five peers fail", func(t *testing.T) []netip.AddrPort {
			return []netip.AddrPort{peer(t, false), peer(t, false), peer(t, false), peer(t, true), peer(t, true)}
		}, true}, // with this agent: 4 of 6 = 67 % >= 55 %, and >= 3
		{"two of five peers fail", func(t *testing.T) []netip.AddrPort {
			return []netip.AddrPort{peer(t, false), peer(t, false), peer(t, true), peer(t, true), peer(t, true)}
		}, false}, // 3 of 6 = 50 %
		{"no peer", func(*testing.T) []netip.AddrPort { return nil }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			peers := c.peers(t)
			renewing := false
			p := &PeerProbe{Peers: func() []netip.AddrPort { return append([]netip.AddrPort(nil), peers...) }, Renewing: func() bool { return renewing }, Interval: 20 * time.Millisecond}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); p.Run(ctx) }()
			defer func() { cancel(); <-done }()
			// Wait for a complete round.
			deadline := time.Now().Add(5 * time.Second)
			for {
				p.mu.Lock()
				round := p.last
				p.mu.Unlock()
				if round.asked == len(peers) && !round.until.IsZero() || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := p.SharedOutage(); got != c.want {
				t.Errorf("SharedOutage() = %v, want %v", got, c.want)
			}
		})
	}
}

// TestPeerProbeAsksNobodyWhileRenewing: an agent that renews has no
// question, and no stale answer counts once it is more than two intervals
// old.
func TestPeerProbeAsksNobodyWhileRenewing(t *testing.T) {
	asked := 0
	p := &PeerProbe{Peers: func() []netip.AddrPort { asked++; return nil }, Renewing: func() bool { return true }, Interval: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p.Run(ctx)
	if asked != 0 {
		t.Errorf("a renewing agent asked its peers %d times", asked)
	}
	p.last = peerRound{until: time.Now().Add(-time.Second + 2*p.Interval), peers: 2, asked: 2, notRenew: 2}
	if p.SharedOutage() {
		t.Error("a round a second old (interval 10 ms) still counts")
	}
}

// TestRenewingTurnsFalseWhenOverdue: an agent whose next renewal has not
// succeeded an interval and a half after the last one tells its peers it
// does not renew, though no attempt has failed yet (it hangs).
func TestRenewingTurnsFalseWhenOverdue(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))
	r, err := NewRenewer(fake.NewClientset().CoordinationV1(), RenewerConfig{Namespace: "ns", NodeName: "n1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Renewing() {
		t.Error("not renewing before the first attempt")
	}
	if err := r.RenewOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(DefaultRenewInterval * 3 / 2)
	if !r.Renewing() {
		t.Error("not renewing an interval and a half after a renewal")
	}
	clk.Step(time.Millisecond)
	if r.Renewing() {
		t.Error("still renewing past an interval and a half without a renewal")
	}
}
